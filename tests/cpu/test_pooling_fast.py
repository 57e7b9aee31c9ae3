"""The fast max and average pooling (kuiper/cpu/pooling.py) against the reference layers."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference
from cpu_tools import assert_views_match_reference

from kuiper.cpu.pooling import PART_ELEMENTS

RNG = np.random.default_rng(17)

# (3, 5, 7) is one part (no batch dim); (2, 32, 99, 101) makes two parts, (1, 64, 112, 112) three
SHAPES = [(3, 5, 7), (2, 32, 99, 101), (1, 64, 112, 112)]
assert 64 * 112 * 112 >= 3 * PART_ELEMENTS > 2 * 32 * 99 * 101 >= 2 * PART_ELEMENTS

# (kernel, stride, padding, dilation, ceil_mode)
MAX_WINDOWS = [
    ((3, 3), (2, 2), (1, 1), (1, 1), False),  # ResNet's stem
    ((2, 2), None, (0, 0), (1, 1), False),  # stride defaults to the kernel
    ((3, 2), (2, 1), (1, 1), (1, 1), True),
    ((2, 3), (1, 2), (0, 1), (2, 3), False),
    ((3, 3), (3, 2), (1, 1), (2, 2), True),
]
# (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_WINDOWS = [
    ((3, 3), (2, 2), (1, 1), False, True, None),
    ((3, 3), (2, 2), (1, 1), True, False, None),
    ((2, 2), None, (0, 0), False, True, None),
    ((4, 5), (3, 2), (2, 2), True, True, 5),
    ((3, 2), (2, 1), (1, 1), True, False, None),
]


def image(shape, special=False):
    x = RNG.standard_normal(shape).astype(np.float32)
    if special:  # NaN spreads to the windows over it; an infinity too, or NaN where +inf meets -inf
        flat = x.reshape(-1)
        places = RNG.choice(flat.size, min(flat.size, 30), replace=False)
        flat[places] = np.array([np.nan, np.inf, -np.inf], np.float32)[np.arange(len(places)) % 3]
    return x


def max_params(kernel, stride, padding, dilation, ceil_mode):
    return dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                return_indices=False)


def avg_params(kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode,
                count_include_pad=count_include_pad, divisor_override=divisor_override)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "special"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("window", MAX_WINDOWS, ids=str)
@pytest.mark.parametrize("type", ["nn.MaxPool2d", "F.max_pool2d"])
def test_fast_max_pool_matches_reference(type, window, shape, special):
    assert assert_every_path_matches_reference(type, image(shape, special), params=max_params(*window)) \
        == ["forward_numpy"]


@pytest.mark.parametrize("special", [False, True], ids=["finite", "special"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("window", AVG_WINDOWS, ids=str)
@pytest.mark.parametrize("type", ["nn.AvgPool2d", "F.avg_pool2d"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf
def test_fast_avg_pool_matches_reference(type, window, shape, special):
    assert assert_every_path_matches_reference(type, image(shape, special), params=avg_params(*window)) \
        == ["forward_numpy"]


@pytest.mark.parametrize("layout", ["strided input", "strided output", "both"])
@pytest.mark.parametrize("type, params", [("nn.MaxPool2d", max_params(*MAX_WINDOWS[0])),
                                          ("nn.AvgPool2d", avg_params(*AVG_WINDOWS[0]))], ids=["max", "avg"])
def test_strided_arrays_match_reference(type, params, layout):
    """1x64x112x112 pooled 3x3, stride 2, padding 1 into 1x64x56x56."""
    x = image((1, 64, 112, 224))[..., ::2] if layout != "strided output" else image((1, 64, 112, 112))
    out = np.empty((1, 64, 56, 56, 2), np.float32)
    assert_views_match_reference(type, [x], out[..., 0] if layout != "strided input" else out[..., 0].copy(),
                                 params=params)
