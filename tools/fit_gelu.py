"""Fit the polynomial of the numpy backend's GELU (kuiper/cpu/activations.py); prints its coefficients.

    python tools/fit_gelu.py

For a = |x|, GELU(-a) = -a·Q(a) with Q(a) = erfc(a/√2)/2, the upper tail of the normal distribution. With
v = -a/(a + 3) and κ = log2(e)/2 the fit is

    a·Q(a) = -v · 2^(P(v) - κa²)

P is smooth on the v of a in [0, A_MAX], where GELU(-a) is a normal float32 (below about -13.15 it is
subnormal, then 0). Least squares at Chebyshev nodes of that interval come within a few percent of the
best maximum error; the printed error is relative, of a·Q(a), in float64.
"""

import math

import numpy as np

C = 3.0  # with degree 7, the C of least error (2: 1.3e-6, 2.8: 7.8e-7, 3.2: 6.4e-7)
DEGREE = 7  # degree 6: 6.0e-6; 8: 2.3e-7
A_MAX = 13.2
KAPPA = 0.5 / math.log(2)


def target(a: np.ndarray) -> np.ndarray:
    """P at the v of each a: log2(a·Q(a) / -v) + κa², with a / -v = a + C."""
    return np.array([math.log2((x + C) * 0.5 * math.erfc(x / math.sqrt(2))) for x in a]) + KAPPA * a * a


def fit(nodes: int = 4001) -> tuple:
    """(coefficients of P, constant term first; the largest relative error on a grid 10x finer)."""
    v_max = A_MAX / (A_MAX + C)
    v = -v_max * (1 - np.cos(np.linspace(0, np.pi, nodes))) / 2
    coefficients = np.linalg.lstsq(np.vander(v, DEGREE + 1, increasing=True), target(C * -v / (1 + v)),
                                   rcond=None)[0]
    a = np.linspace(0, A_MAX, 10 * nodes)
    error = np.polynomial.polynomial.polyval(-a / (a + C), coefficients) - target(a)
    return coefficients, math.log(2) * np.abs(error).max()  # 2^e = 1 + e·ln 2 for small e


if __name__ == "__main__":
    coefficients, error = fit()
    print("P =", ", ".join(f"{c:.9g}" for c in coefficients))
    print(f"largest relative error {error:.2e}")
