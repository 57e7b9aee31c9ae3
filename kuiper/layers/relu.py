"""ReLU: max(x, 0), element by element. The simplest layer, and the pattern every other layer follows."""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("nn.ReLU", "F.relu")
class ReLU(ElementwiseLayer):
    in_place = True

    def apply(self, x, out):
        np.maximum(x, 0.0, out=out)
