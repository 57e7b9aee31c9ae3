"""nn.BatchNorm2d on OpenCL (cl/batchnorm.cl) against its numpy forward, on the numpy tests' shapes and on
planes wider than a work-group."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from test_batchnorm2d import make_bn, statistics

RNG = np.random.default_rng(13)


@pytest.mark.parametrize("shape", [(1, 5, 7, 5), (3, 5, 1, 1), (2, 5, 9, 11), (2, 5, 33, 31)])
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_opencl_matches_numpy(cl_runtime, shape, affine):
    layer = make_bn(statistics(RNG, 5, affine), eps=1e-3, affine=affine, input_shape=shape)
    x = (3.0 * RNG.standard_normal(shape)).astype(np.float32)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=1e-6)  # the same two roundings as numpy
