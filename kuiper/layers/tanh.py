"""Tanh: the hyperbolic tangent, element by element (pnnx writes torch.tanh and Tensor.tanh as F.tanh)."""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("nn.Tanh", "F.tanh")
class Tanh(ElementwiseLayer):

    def apply(self, x, out):
        np.tanh(x, out=out)
