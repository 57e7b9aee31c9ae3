"""AdaptiveAvgPool2d / AdaptiveMaxPool2d (with and without int64 indices): the kernels of cl/pooling.cl
against the numpy forward, on every device, over the numpy tests' cases (global pooling, non-divisible and
overlapping bins, more bins than positions, a kept size, unbatched inputs)."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from kuiper.runtime.backends import make_layer
from test_adaptive_pool import CASES

RNG = np.random.default_rng(4)
LARGE = ((3, 16, 23, 19), (5, 7))  # several work-groups' worth of outputs


@pytest.mark.parametrize("shape, output_size", CASES + [LARGE, ((2, 5, 29, 31), (1, 1))])
@pytest.mark.parametrize("cpu", [True, False])  # global pooling: whole planes in vectors on CPUs
def test_adaptive_avg_pool_opencl_matches_numpy(cl_runtime, monkeypatch, shape, output_size, cpu):
    monkeypatch.setattr(cl_runtime, "is_cpu", cpu)
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = make_layer("nn.AdaptiveAvgPool2d", params=dict(output_size=output_size), input_shapes=[shape])
    assert_opencl_matches_numpy(layer, cl_runtime, x)


@pytest.mark.parametrize("shape, output_size", CASES + [LARGE])
def test_adaptive_max_pool_opencl_matches_numpy(cl_runtime, shape, output_size):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = make_layer("nn.AdaptiveMaxPool2d", params=dict(output_size=output_size, return_indices=False),
                       input_shapes=[shape])
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0)


@pytest.mark.parametrize("shape, output_size", CASES + [LARGE])
def test_adaptive_max_pool_indices_opencl_match_numpy(cl_runtime, shape, output_size):
    # few distinct values: most bins hold their maximum several times, and the first one must be reported
    x = RNG.integers(0, 3, size=shape).astype(np.float32)
    x.flat[::7] = np.nan  # and several NaNs in some bins: the last one is reported
    layer = make_layer("F.adaptive_max_pool2d", params=dict(output_size=output_size, return_indices=True),
                       input_shapes=[shape], num_outputs=2)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0)
