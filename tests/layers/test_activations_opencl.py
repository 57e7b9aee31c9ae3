"""Every activation's OpenCL kernel (cl/activation.cl) against its numpy forward, on every device."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from kuiper.runtime.operators import make_layer

ACTIVATIONS = [
    ("nn.ReLU", {}), ("nn.Sigmoid", {}), ("nn.Tanh", {}), ("nn.SiLU", {}), ("nn.Hardsigmoid", {}),
    ("nn.Hardswish", {}), ("nn.GELU", {}), ("nn.GELU", {"approximate": "tanh"}),
    ("nn.Hardtanh", {"min_val": -0.5, "max_val": 0.75}), ("nn.ReLU6", {}),
    ("nn.LeakyReLU", {"negative_slope": 0.1}), ("nn.LeakyReLU", {"negative_slope": 2.0}),
    ("torch.clamp", {"min": None, "max": 0.3}), ("torch.clamp", {"min": -0.2, "max": None}),
]


@pytest.mark.parametrize("shape", [(1,), (3, 5, 7, 9), (2, 7, 1, 1), (1, 3, 17, 13)])
@pytest.mark.parametrize("type_, params", ACTIVATIONS, ids=[f"{t}{p}" for t, p in ACTIVATIONS])
def test_activation_opencl_matches_numpy(cl_runtime, type_, params, shape):
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32) * 6
    x.flat[0] = -60.0  # far tails: overflow-free formulas on both paths
    x.flat[-1] = np.nan  # passed through as PyTorch does (OpenCL's fmax/clamp would drop it)
    layer = make_layer(type_, params=params, input_shapes=[shape])
    assert_opencl_matches_numpy(layer, cl_runtime, x)
