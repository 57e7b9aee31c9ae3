"""GELU: x · Φ(x), with Φ the standard normal CDF; `approximate='tanh'` uses the tanh fit of Φ instead.

    'none' (pnnx writes no parameter):      Φ(x) = (1 + erf(x/√2)) / 2 = erfc(-x/√2) / 2
    'tanh' (pnnx writes approximate=tanh):  Φ(x) ≈ (1 + tanh(u)) / 2 = σ(2u),  u = √(2/π)·(x + 0.044715x³)

The right-hand forms are the ones computed. For x ≪ 0, 1 + erf(...) and 1 + tanh(...) are 1 minus nearly
1, which cancels away the significant digits; erfc and the overflow-free sigmoid compute the small value
directly, with full relative precision.
"""

import math

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer, erfc
from kuiper.layers.registry import register
from kuiper.layers.sigmoid import sigmoid

_TWO_SQRT_2_OVER_PI = 2.0 * math.sqrt(2.0 / math.pi)

# Beyond |x| = 1e6, |2u| > 1e16 and σ(2u) is exactly 0 or 1 in any float precision, so clipping x there
# changes no result, and keeps x³ (at most 1e18) far from overflow even in float32.
_SIGMOID_SATURATED_FROM = 1e6


@register("nn.GELU", "F.gelu")
class GELU(ElementwiseLayer):
    def __init__(self, op):
        super().__init__(op)
        self.approximate = self.str_param("approximate", "none", choices=("none", "tanh"))

    def apply(self, x, out):
        if self.approximate == "tanh":
            two_u = np.clip(x, -_SIGMOID_SATURATED_FROM, _SIGMOID_SATURATED_FROM)
            np.square(two_u, out=out)
            out *= _TWO_SQRT_2_OVER_PI * 0.044715
            out += _TWO_SQRT_2_OVER_PI
            two_u *= out                           # 2u = 2√(2/π) · x · (1 + 0.044715 x²)
            sigmoid(two_u, out)
        else:
            np.multiply(x, -1.0 / math.sqrt(2.0), out=out)
            erfc(out, out)
            out *= 0.5
        out *= x                                   # out was Φ(x), in [0, 1]: x · Φ(x) cannot overflow
