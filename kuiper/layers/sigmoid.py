"""Sigmoid: σ(x) = 1 / (1 + e⁻ˣ), element by element (pnnx writes torch.sigmoid as F.sigmoid).

The formula as written overflows: e⁻ˣ is inf for x below about -88 in float32. Written with e = e^-|x|,
which lies in (0, 1] for every x,
    σ(x) = 1 / (1 + e)   for x ≥ 0,
    σ(x) = e / (1 + e)   for x < 0     (multiply the top and bottom of 1 / (1 + e⁻ˣ) by eˣ),
nothing overflows and both halves keep full relative precision, down to the tiny values of σ(-80).
"""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


def sigmoid(x, out):
    """out = σ(x), without overflow (`out` must not be `x`). SiLU and GELU use it too."""
    np.abs(x, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)               # out = e, in (0, 1]
    denominator = out + 1.0
    # the numerator, without a branch: max(e, 1) = 1 where x ≥ 0, max(e, 0) = e where x < 0
    np.maximum(out, x >= 0, out=out)
    out /= denominator


@register("nn.Sigmoid", "F.sigmoid")
class Sigmoid(ElementwiseLayer):

    def apply(self, x, out):
        sigmoid(x, out)
