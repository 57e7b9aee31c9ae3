"""Hardsigmoid: a piecewise-linear sigmoid, relu6(x + 3) / 6: 0 below -3, 1 above 3, a line between."""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


def hardsigmoid(x, out):
    """out = min(max(x + 3, 0), 6) / 6, in PyTorch's order of operations. Hardswish uses it too."""
    np.add(x, 3.0, out=out)
    np.clip(out, 0.0, 6.0, out=out)
    out /= 6.0


@register("nn.Hardsigmoid", "F.hardsigmoid")
class Hardsigmoid(ElementwiseLayer):

    def apply(self, x, out):
        hardsigmoid(x, out)
