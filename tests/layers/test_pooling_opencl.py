"""MaxPool2d / AvgPool2d: the kernels of cl/pooling.cl against the numpy forward, on every device, over the
numpy tests' cases (odd sizes, stride 2 on odd inputs, padding, dilation, ceil_mode windows, divisors)."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from test_pooling import AVG_CASES, MAX_CASES, avg_pool, max_pool

RNG = np.random.default_rng(3)

# several work-groups' worth of outputs, a row count that is no multiple of anything
LARGE_MAX = ((3, 8, 33, 31), (3, 3), (2, 2), (1, 1), (1, 1), True)
LARGE_AVG = ((3, 8, 33, 31), (3, 3), (2, 2), (1, 1), True)


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, ceil_mode", MAX_CASES + [LARGE_MAX])
def test_max_pool_opencl_matches_numpy(cl_runtime, shape, kernel, stride, padding, dilation, ceil_mode):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = max_pool(shape, kernel, stride, padding, dilation, ceil_mode)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0)  # a maximum is one of the inputs: exact


@pytest.mark.parametrize("divisor_override", [None, 5])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode", AVG_CASES + [LARGE_AVG])
def test_avg_pool_opencl_matches_numpy(cl_runtime, shape, kernel, stride, padding, ceil_mode, count_include_pad,
                                       divisor_override):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = avg_pool(shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    assert_opencl_matches_numpy(layer, cl_runtime, x)


def test_ceil_mode_worked_example_opencl(cl_runtime):
    # the window past the padding and the dropped window that would start in it (see test_pooling)
    x = np.arange(18, dtype=np.float32).reshape(1, 1, 3, 6)
    args = dict(kernel=(2, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True)
    assert_opencl_matches_numpy(max_pool(x.shape, **args), cl_runtime, x, rtol=0)
    for count_include_pad in (True, False):
        assert_opencl_matches_numpy(avg_pool(x.shape, **args, count_include_pad=count_include_pad), cl_runtime, x)


def test_max_pool_nan_and_dilation_gaps_opencl(cl_runtime):
    # a NaN wins its windows as in PyTorch; with dilation 3 over padding 1, a window can miss the input (-inf)
    x = RNG.standard_normal((1, 2, 7, 8)).astype(np.float32)
    x[0, 0, 3, 4] = np.nan
    x[0, 1, 0, 0] = -np.inf
    for dilation in ((1, 1), (3, 3)):
        layer = max_pool(x.shape, (3, 3), (1, 2), (1, 1), dilation, ceil_mode=True)
        assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0)


@pytest.mark.parametrize("kernel, stride, padding, dilation", [
    ((3, 3), (2, 2), (1, 1), (1, 1)),  # ResNet's
    ((2, 2), (2, 2), (0, 0), (1, 1)),
    ((3, 5), (1, 1), (1, 2), (1, 1)),
    ((3, 3), (1, 3), (1, 1), (2, 2)),
    ((2, 3), (1, 9), (0, 1), (1, 1)),  # 66 columns for eight outputs: too wide, max_pool2d's row split on CPUs
])
def test_max_pool_rows_of_many_outputs_opencl(cl_runtime, kernel, stride, padding, dilation):
    # rows of 16-50 outputs: CPUs' pool2d_rows runs whole blocks of eight lying inside the row (loaded
    # without a test per column), blocks over the edges and a short last block; NaNs and -inf among them
    x = RNG.standard_normal((2, 3, 9, 50)).astype(np.float32)
    x[0, 0, 4, 20:23] = np.nan
    x[1, 2, :, 30] = -np.inf
    layer = max_pool(x.shape, kernel, stride, padding, dilation, ceil_mode=False)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kernel, stride, padding", [
    ((3, 3), (1, 1), (1, 1)),  # Inception's
    ((2, 2), (2, 2), (0, 0)),  # DenseNet's transitions
    ((3, 5), (2, 1), (1, 2)),
    ((2, 3), (1, 9), (0, 1)),  # too wide for pool2d_rows on CPUs: avg_pool2d's rows
])
def test_avg_pool_rows_of_many_outputs_opencl(cl_runtime, kernel, stride, padding, count_include_pad):
    # as above for the average: blocks inside the row and over its edges, where the divisor changes lane by lane
    x = RNG.standard_normal((2, 3, 9, 50)).astype(np.float32)
    layer = avg_pool(x.shape, kernel, stride, padding, False, count_include_pad, None)
    assert_opencl_matches_numpy(layer, cl_runtime, x)


@pytest.mark.parametrize("kind", ["max", "max dilated", "avg"])
def test_the_other_device_kinds_work_split_is_right_too(cl_runtime, monkeypatch, kind):
    """A work-item per output row on CPUs, per output on GPUs (max pooling's built for its window): each split on
    the other kind of device; dilated windows that miss the input (-inf) and NaNs among the inputs too."""
    monkeypatch.setattr(cl_runtime, "is_cpu", not cl_runtime.is_cpu)
    shape, kernel, stride, padding, _, ceil_mode = LARGE_MAX
    x = RNG.standard_normal(shape).astype(np.float32)
    x[1, 2, 5, 6:9] = np.nan
    layer = (max_pool(shape, kernel, stride, padding, (1, 1), ceil_mode) if kind == "max"
             else max_pool(shape, kernel, (1, 2), padding, (3, 3), ceil_mode) if kind == "max dilated"
             else avg_pool(shape, kernel, stride, padding, ceil_mode, False, None))
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0 if kind != "avg" else 1e-4)
