"""What the element-wise layers share: the one-in, one-out base class, and the error function.

An element-wise layer maps every element of its input to the same position of its output, so the output
shape is the input shape and a layer only has to say how to compute one array from another: `apply`.
Every `apply` writes into the preallocated output with numpy's `out=`, one whole-array pass per step, and
none loops over elements in Python or branches per element (a boolean mask is slower in numpy than a
few extra arithmetic passes, so the formulas blend with arithmetic instead). The numpy backend runs each
formula block by block over kuiper's threads instead (kuiper/cpu/elementwise.py); the result is the same.

numpy has no erf, which GELU and pnnx's `erf(...)` expressions need, so it is built here from a published
approximation (see `erfc`).
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer


class ElementwiseLayer(Layer):
    """One input, one output of the same shape: subclasses implement `apply(x, out)`."""

    #: `apply` may be given its input as its output (a formula that never reads an element after writing one),
    #: so the fusion pass (runtime/fusion.py) may let the layer overwrite an input nothing else reads
    in_place: bool = False

    def output_shapes(self, input_shapes):
        return [input_shapes[0]]

    def forward_numpy(self, inputs, outputs):
        self.apply(inputs[0], outputs[0])

    def apply(self, x: np.ndarray, out: np.ndarray) -> None:
        """Write f(x) into `out`, an array of x's shape: x itself only in layers marked `in_place`."""
        raise NotImplementedError(f"{type(self).__name__} must implement apply")


# ---- the error function ----------------------------------------------------------------------------------

# Numerical Recipes in C (2nd ed., section 6.2, "erfcc"): a Chebyshev fit with t = 1 / (1 + z/2),
#   erfc(z) ≈ t · exp(-z² + P(t)),  z ≥ 0,
# whose *relative* error is below 1.2e-7 for every z ≥ 0. Coefficients of P, constant term first.
_ERFC_COEFFICIENTS = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)

# erfc(z) is below the smallest float64 (about 5e-324) once z > 27.3: clamping z at 30 changes no
# result and keeps z² from overflowing.
_ERFC_ZERO_FROM = 30.0

# Near 0, erf(x) = 1 - erfc(x) loses its relative accuracy (erf is small, erfc's error is not), so there
# erf uses its Maclaurin series  erf(x) = 2/√π · Σ (-1)ⁿ x²ⁿ⁺¹ / (n! (2n+1)). For |x| < 1/2 the terms
# after n = 7 are below 1e-10 of the sum. Coefficients of the series in x², constant term first.
_ERF_SERIES_BELOW = 0.5
_ERF_SERIES = tuple(
    2.0 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(8)
)


def horner(coefficients, t, out):
    """out = c0 + c1·t + c2·t² + ... (two coefficients or more, constant term first), by Horner's rule; `out`
    must not be `t`."""
    np.multiply(t, coefficients[-1], out=out)
    out += coefficients[-2]
    for c in reversed(coefficients[:-2]):
        out *= t
        out += c
    return out


def erfc(x, out: np.ndarray) -> np.ndarray:
    """out = the complementary error function 1 - erf(x); relative error below 1.2e-7 (in float64).

    `out` sets the dtype computed in, and may be `x` itself (the expression layer computes in place).
    """
    negative = np.less(x, 0)                      # read x before out is written
    z = np.abs(x, out=np.empty_like(out))
    np.minimum(z, _ERFC_ZERO_FROM, out=z)
    np.multiply(z, 0.5, out=out)
    out += 1.0
    np.reciprocal(out, out=out)                   # out = t
    exponent = horner(_ERFC_COEFFICIENTS, out, np.empty_like(out))
    z *= z
    exponent -= z                                 # P(t) - z²
    np.exp(exponent, out=exponent)
    out *= exponent                               # out = erfc(|x|)
    # erfc(-z) = 2 - erfc(z), without a branch: add 2·(1 - erfc(|x|)) times 1 where x < 0, 0 elsewhere
    reflection = np.subtract(1.0, out, out=z)
    reflection *= negative
    reflection *= 2.0
    out += reflection
    return out


def erf(x, out: np.ndarray) -> np.ndarray:
    """out = the error function of x; relative error about 1e-7 (in float64). `out` may be `x` itself."""
    magnitude = np.abs(x, out=np.empty_like(out))  # read x before out is written
    near_zero = magnitude < _ERF_SERIES_BELOW
    far = np.logical_not(near_zero)
    # the series erf(x) = x · S(x²), at x clipped to where it converges fast (and stays finite)
    x_near = np.clip(x, -_ERF_SERIES_BELOW, _ERF_SERIES_BELOW, out=magnitude)
    series = horner(_ERF_SERIES, np.square(x_near), np.empty_like(out))
    series *= x_near
    np.subtract(1.0, erfc(x, out), out=out)
    # keep the series near zero and 1 - erfc elsewhere: multiplying by 1 or 0 is exact, a difference is not
    out *= far
    series *= near_zero
    out += series
    return out
