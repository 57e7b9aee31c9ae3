"""Every activation layer against its formula, evaluated here independently in float64.

The input holds ordinary values, the Hardtanh/ReLU6/Hardsigmoid corners, values where exp() overflows
float32 (|x| > 88), and huge ones; no layer may raise a floating-point overflow or invalid-value warning.
"""

import math

import numpy as np
import pytest

import kuiper.layers.gelu  # noqa: F401  (each import registers its layers)
import kuiper.layers.hardsigmoid  # noqa: F401
import kuiper.layers.hardswish  # noqa: F401
import kuiper.layers.hardtanh  # noqa: F401
import kuiper.layers.leaky_relu  # noqa: F401
import kuiper.layers.relu  # noqa: F401
import kuiper.layers.sigmoid  # noqa: F401
import kuiper.layers.silu  # noqa: F401
import kuiper.layers.tanh  # noqa: F401
from kuiper.core.errors import LayerError
from kuiper.layers.elementwise import erf, erfc
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(7)

CORNERS = [-6, -3, -2, -1, -0.5, 0, 0.75, 1, 3, 6]
LARGE = [20, 50, 88, 89, 100, 1e4, 1e30]
X = np.concatenate([
    np.linspace(-8, 8, 161), CORNERS, LARGE, np.negative(LARGE), [1e-30, -1e-30, 1e-3, -1e-3],
    RNG.standard_normal(200) * 4,
]).astype(np.float32)


def exp(x):
    with np.errstate(over="ignore"):  # exp(1e30) = inf is the right limit for these formulas
        return np.exp(x)


def sigmoid(x):
    return 1.0 / (1.0 + exp(-x))


def clamp(x, low, high):
    return np.where(x < low, low, np.where(x > high, high, x))


def hardsigmoid(x):
    return np.where(x <= -3, 0.0, np.where(x >= 3, 1.0, x / 6 + 0.5))


def gelu_erf(x):
    # 1 + erf(-t) = erfc(t): the same formula, written without cancelling digits for x << 0
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x])


def gelu_tanh(x):
    u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return 0.5 * x * (2.0 / (1.0 + exp(-2.0 * u)))  # 1 + tanh(u), written without cancellation


# float32 carries ~7 digits: a few ulp for the multi-step formulas
RTOL = 2e-6
# GELU's tail is exp(-x²/2)-like: the float32 rounding of its exponent (~ulp(x²/2), up to 4e-6 of the
# result where x ≈ -6) passes straight into the result. (PyTorch loses all digits there: 1 + erf ≈ 0.)
GELU_RTOL = 1e-5

# (pnnx types, params, reference on float64, rtol)
CASES = [
    (("nn.ReLU", "F.relu"), {}, lambda x: np.where(x > 0, x, 0.0), 0),
    (("nn.Sigmoid", "F.sigmoid"), {}, sigmoid, RTOL),
    (("nn.Tanh", "F.tanh"), {}, np.tanh, RTOL),
    (("nn.Hardtanh", "F.hardtanh"), {}, lambda x: clamp(x, -1.0, 1.0), 0),
    (("nn.Hardtanh", "F.hardtanh"), {"min_val": -2.0, "max_val": 3.0}, lambda x: clamp(x, -2.0, 3.0), 0),
    (("nn.Hardtanh", "F.hardtanh"), {"min_val": 0, "max_val": 6}, lambda x: clamp(x, 0.0, 6.0), 0),  # ints
    (("nn.Hardtanh",), {"min_val": 0.75, "max_val": 0.75}, lambda x: np.full_like(x, 0.75), 0),
    (("nn.ReLU6", "F.relu6"), {}, lambda x: clamp(x, 0.0, 6.0), 0),
    (("nn.LeakyReLU", "F.leaky_relu"), {}, lambda x: np.where(x >= 0, x, 0.01 * x), RTOL),
    (("nn.LeakyReLU", "F.leaky_relu"), {"negative_slope": 0.2}, lambda x: np.where(x >= 0, x, 0.2 * x), RTOL),
    (("nn.LeakyReLU",), {"negative_slope": 2}, lambda x: np.where(x >= 0, x, 2.0 * x), 0),
    (("nn.LeakyReLU",), {"negative_slope": -0.5}, lambda x: np.where(x >= 0, x, -0.5 * x), 0),
    (("nn.SiLU", "F.silu"), {}, lambda x: x * sigmoid(x), RTOL),
    (("nn.Hardsigmoid", "F.hardsigmoid"), {}, hardsigmoid, RTOL),
    (("nn.Hardswish", "F.hardswish"), {}, lambda x: x * hardsigmoid(x), RTOL),
    (("nn.GELU", "F.gelu"), {}, gelu_erf, GELU_RTOL),
    (("nn.GELU", "F.gelu"), {"approximate": "none"}, gelu_erf, GELU_RTOL),
    (("nn.GELU", "F.gelu"), {"approximate": "tanh"}, gelu_tanh, GELU_RTOL),
]
PARAMS = [
    pytest.param(t, params, reference, rtol, id=f"{t}-{params}" if params else t)
    for types, params, reference, rtol in CASES
    for t in types
]


@pytest.mark.parametrize("type, params, reference, rtol", PARAMS)
def test_matches_the_formula(type, params, reference, rtol):
    layer = make_layer(type, params=params, input_shapes=[X.shape])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        (out,) = layer.run_numpy(X)
    assert out.shape == X.shape and out.dtype == np.float32
    # results below 1e-37 are subnormal float32 numbers, with fewer significant bits
    np.testing.assert_allclose(out, reference(X.astype(np.float64)), rtol=rtol, atol=1e-37)


@pytest.mark.parametrize("type, params", [
    ("nn.Hardtanh", {"min_val": 2.0, "max_val": 1.0}),
    ("F.hardtanh", {"min_val": "low"}),
    ("nn.LeakyReLU", {"negative_slope": True}),
    ("nn.GELU", {"approximate": "erf"}),
])
def test_bad_parameters_raise_layer_error(type, params):
    with pytest.raises(LayerError, match=type):
        make_layer(type, params=params, input_shapes=[(4,)])


def test_an_activation_takes_exactly_one_input():
    with pytest.raises(LayerError, match="1 input"):
        make_layer("nn.Sigmoid", input_shapes=[(4,), (4,)])


# ---- the error function behind GELU and expressions' erf() ------------------------------------------------

GRID = np.concatenate([np.linspace(-27, 27, 20001), np.geomspace(1e-300, 27, 2000)])
GRID = np.concatenate([GRID, -GRID])


def test_erfc_is_accurate_to_1_2e_7_relative_in_float64():
    reference = np.array([math.erfc(v) for v in GRID])
    normal = reference > 1e-300  # the far tail is subnormal even in float64
    np.testing.assert_allclose(erfc(GRID, np.empty_like(GRID))[normal], reference[normal], rtol=1.2e-7)


def test_erf_is_accurate_to_1e_7_relative_in_float64_including_near_zero():
    reference = np.array([math.erf(v) for v in GRID])
    np.testing.assert_allclose(erf(GRID, np.empty_like(GRID)), reference, rtol=1e-7, atol=0)


@pytest.mark.parametrize("function, exact", [(erf, math.erf), (erfc, math.erfc)])
def test_erf_and_erfc_limits_and_in_place_use(function, exact):
    limits = np.array([np.inf, -np.inf, 0.0, np.nan])
    result = function(limits, np.empty(4))
    np.testing.assert_array_equal(result[:2], [exact(np.inf), exact(-np.inf)])
    np.testing.assert_allclose(result[2], exact(0.0), rtol=1.2e-7, atol=0)
    assert np.isnan(result[3])
    x = GRID.copy()
    np.testing.assert_array_equal(function(x, x), function(GRID, np.empty_like(GRID)))  # out may be x
