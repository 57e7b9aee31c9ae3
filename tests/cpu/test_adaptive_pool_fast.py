"""The fast global average pooling (kuiper/cpu/adaptive_pool.py) against the reference layer."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference
from cpu_tools import assert_views_match_reference

from kuiper.cpu.adaptive_pool import FastAdaptiveAvgPool2d, mean_column
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(29)


def image(shape, special=False):
    x = RNG.standard_normal(shape).astype(np.float32) + 3  # means far from 0: a wrong divisor shows
    if special:  # inf alone keeps a plane's mean inf; inf with -inf, or NaN, makes it NaN
        flat = x.reshape(-1)
        places = RNG.choice(flat.size, min(flat.size, 12), replace=False)
        flat[places] = np.array([np.nan, np.inf, -np.inf], np.float32)[np.arange(len(places)) % 3]
    return x


# squeeze-excitation sizes, a batch, planes of one pixel and of one row, an unbatched (C, H, W) input
SHAPES = [(1, 1152, 7, 7), (1, 32, 112, 112), (3, 5, 7, 9), (2, 4, 1, 1), (1, 6, 1, 13), (5, 11, 3)]


@pytest.mark.parametrize("type", ["nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d"])
@pytest.mark.parametrize("shape", SHAPES)
def test_global_mean_matches_reference(shape, type):
    assert assert_every_path_matches_reference(type, image(shape), params=dict(output_size=(1, 1))) \
        == ["forward_numpy"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf in the reference's sum
def test_infinities_and_nan_as_the_reference():
    assert_every_path_matches_reference("nn.AdaptiveAvgPool2d", image((2, 9, 5, 6), special=True),
                                        params=dict(output_size=(1, 1)))


@pytest.mark.parametrize("output_size", [(2, 3), (1, 0), (0, 1)])
def test_other_output_sizes_run_the_reference(output_size):
    assert_every_path_matches_reference("nn.AdaptiveAvgPool2d", image((2, 3, 7, 5)),
                                        params=dict(output_size=output_size))


@pytest.mark.parametrize("layout", ["strided input", "strided output"])
def test_strided_arrays_match_reference(layout):
    x = image((2, 6, 7, 10))
    if layout == "strided input":
        x = x[..., ::2]
    out = np.empty((2, 6, 1, 2), np.float32)[..., :1] if layout == "strided output" else np.empty((2, 6, 1, 1),
                                                                                                     np.float32)
    assert_views_match_reference("nn.AdaptiveAvgPool2d", [x], out, params=dict(output_size=(1, 1)))


def test_is_the_numpy_layer_and_its_column_is_shared_read_only():
    layer = make_layer("nn.AdaptiveAvgPool2d", backend="numpy", params=dict(output_size=(1, 1)), input_shapes=[None])
    assert isinstance(layer, FastAdaptiveAvgPool2d)
    column = mean_column(49, np.dtype(np.float32))
    assert column is mean_column(49, np.dtype(np.float32)) and not column.flags.writeable
    assert column.shape == (49, 1) and np.allclose(column, 1 / 49)
