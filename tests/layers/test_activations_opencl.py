"""Every activation's OpenCL kernel (cl/activation.cl) against its numpy forward, on every device."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from kuiper.runtime.backends import make_layer

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


@pytest.mark.parametrize("type_, params", [("nn.Sigmoid", {}), ("nn.SiLU", {}), ("nn.Tanh", {}), ("nn.GELU", {}),
                                           ("nn.GELU", {"approximate": "tanh"})])
def test_exp_formulas_element_by_element(cl_runtime, type_, params):
    """The activations built on cl/activations.h's exp_fit (tanh too), each element within 2e-5 of numpy's forward relative
    to itself, down to 1e-30 (e^x for x from -100 to 100, across float32's range, where exp_fit gives 0 or
    infinity; in the far tails rounding the argument to float32 alone costs a few 1e-6, 1.3e-5 in the tanh
    form's 2u); the infinities and NaN where numpy puts them."""
    x = np.concatenate([np.linspace(-100, 100, 20001, dtype=np.float32),
                        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.0, -88.0, 89.0, -89.0], np.float32),
                        np.array([1e-30, -1e-6, 1e-3, 0.1249, -0.1251], np.float32)])  # tanh's two forms meet at 1/8
    layer = make_layer(type_, backend="opencl", params=params, input_shapes=[x.shape])
    with np.errstate(over="ignore", invalid="ignore"):
        want = layer.run_numpy(x)[0]
    got = layer.run_opencl(cl_runtime, x)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=1e-30)


def test_opencl_gelu_uses_the_numpy_backends_fit():
    """act_gelu in cl/activations.h writes out the polynomial of kuiper/cpu/activations.py's FastGELU: the two
    backends share one fit (tools/fit_gelu.py), so a refit must reach both."""
    import re

    from kuiper.cpu.activations import _GELU_P
    from kuiper.opencl.runtime import CL_DIR

    source = (CL_DIR / "activations.h").read_text()
    body = source[source.index("T act_gelu##S("):]
    body = body[:body.index("}")]
    coefficients = [float(c) for c in re.findall(r"(-?\d+\.\d+)f", body[body.index("const T p"):
                                                                       body.index("const T q")])]
    assert coefficients == list(_GELU_P)
