"""Checkpoint of lesson 7: the loops of exercises/lesson_07.py, held to kuiper's pooled_size, MaxPool2d and
AvgPool2d over many window geometries (padding, stride, dilation, ceil_mode, the three divisor rules)."""

import itertools

import numpy as np
import pytest

from kuiper.layers.pooling import pooled_size
from kuiper.runtime.backends import make_layer
from lesson_tools import exercise

ex = exercise(7)


def test_pooled_size_on_a_grid():
    checked = 0
    for size, kernel, stride, dilation, ceil in itertools.product(range(1, 12), range(1, 5), range(1, 4), (1, 2),
                                                                   (False, True)):
        for padding in range(0, kernel // 2 + 1):
            if size + 2 * padding < dilation * (kernel - 1) + 1:
                continue
            case = (size, kernel, stride, padding, dilation, ceil)
            assert ex.pooled_size(*case) == pooled_size(*case), case
            checked += 1
    assert checked > 800


MAX_CASES = [  # kernel, stride, padding, dilation, ceil_mode, input (H, W)
    ((3, 3), (2, 2), (1, 1), (1, 1), False, (9, 8)),
    ((3, 3), (3, 3), (1, 1), (1, 1), True, (13, 11)),
    ((2, 3), (2, 1), (0, 1), (1, 1), True, (7, 6)),
    ((3, 2), (1, 2), (1, 0), (2, 1), False, (9, 9)),
    ((2, 2), (2, 2), (0, 0), (2, 2), True, (8, 9)),
]


@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode, size", MAX_CASES)
def test_max_pool2d_is_kuipers(kernel, stride, padding, dilation, ceil_mode, size):
    # all negative: a padded position must never win
    x = np.random.default_rng(sum(size)).standard_normal((2, 3, *size)).astype(np.float32) - 3
    params = dict(kernel_size=list(kernel), stride=list(stride), padding=list(padding), dilation=list(dilation),
                  ceil_mode=ceil_mode)
    layer = make_layer("nn.MaxPool2d", input_shapes=(x.shape,), params=params)
    np.testing.assert_array_equal(ex.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode), layer.run_numpy(x)[0])


AVG_CASES = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, input (H, W)
    ((3, 3), (2, 2), (1, 1), False, True, None, (7, 8)),
    ((3, 3), (2, 2), (1, 1), False, False, None, (7, 8)),
    ((2, 2), (2, 2), (0, 0), True, True, None, (5, 5)),
    ((3, 3), (2, 2), (1, 1), True, True, None, (8, 6)),
    ((3, 3), (2, 2), (1, 1), True, False, None, (8, 6)),
    ((2, 3), (1, 2), (1, 1), False, True, 5, (6, 7)),
]


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode, include, divisor, size", AVG_CASES)
def test_avg_pool2d_is_kuipers(kernel, stride, padding, ceil_mode, include, divisor, size):
    x = np.random.default_rng(sum(size)).standard_normal((2, 3, *size)).astype(np.float32)
    params = dict(kernel_size=list(kernel), stride=list(stride), padding=list(padding), ceil_mode=ceil_mode,
                  count_include_pad=include)
    if divisor is not None:
        params["divisor_override"] = divisor
    layer = make_layer("nn.AvgPool2d", input_shapes=(x.shape,), params=params)
    got = ex.avg_pool2d(x, kernel, stride, padding, ceil_mode, include, divisor)
    np.testing.assert_allclose(got, layer.run_numpy(x)[0], rtol=1e-5, atol=1e-6)
