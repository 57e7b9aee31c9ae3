"""Hardtanh: x clamped to [min_val, max_val] (by default [-1, 1]); ReLU6 is Hardtanh(0, 6).

pnnx writes `min_val` and `max_val` for nn.Hardtanh and F.hardtanh (ints when the model gave ints), and
no parameters for nn.ReLU6 and F.relu6.
"""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("nn.Hardtanh", "F.hardtanh")
class Hardtanh(ElementwiseLayer):
    default_min, default_max = -1.0, 1.0

    def __init__(self, op):
        super().__init__(op)
        # an infinite bound leaves that side open, as in PyTorch
        self.min_val = self.float_param("min_val", self.default_min, finite=False)
        self.max_val = self.float_param("max_val", self.default_max, finite=False)
        if self.min_val > self.max_val:
            raise self.error(f"min_val={self.min_val} is greater than max_val={self.max_val}")

    in_place = True

    def apply(self, x, out):
        np.clip(x, self.min_val, self.max_val, out=out)


@register("nn.ReLU6", "F.relu6")
class ReLU6(Hardtanh):
    default_min, default_max = 0.0, 6.0
