"""kuiper.Int8Linear on OpenCL (cl/int8.cl reads the int8 weights and widens them in registers) against its numpy
forward, on every usable device: one token (decode), token counts past a work-item's block, ragged groups."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from test_int8_linear import make_int8

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("in_features, out_features, shape", [
    (64, 48, (1, 1, 64)),        # decode
    (80, 72, (1, 7, 80)),        # tokens past a block of 4, a ragged last group of 16
    (688, 96, (2, 3, 688)),      # groups of 32 then 16
    (7, 5, (7,)), (20, 3, (9, 20)), (33, 17, (5, 33)),  # groups shorter than a vector
])
@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_opencl_matches_numpy(cl_runtime, in_features, out_features, shape, bias):
    layer, _, _ = make_int8(in_features, out_features, bias, input_shape=shape, rng=RNG)
    assert_opencl_matches_numpy(layer, cl_runtime, RNG.standard_normal(shape).astype(np.float32))
