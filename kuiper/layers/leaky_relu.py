"""LeakyReLU: x where x ≥ 0, negative_slope · x where x < 0 (pnnx always writes negative_slope).

Without a per-element branch: with a = negative_slope ≤ 1, a·x ≤ x exactly where x ≥ 0, so the result
is max(x, a·x); with a > 1 the inequality turns round and it is min(x, a·x).
"""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("nn.LeakyReLU", "F.leaky_relu")
class LeakyReLU(ElementwiseLayer):
    def __init__(self, op):
        super().__init__(op)
        self.negative_slope = self.float_param("negative_slope", 0.01)
        self.pick = np.maximum if self.negative_slope <= 1.0 else np.minimum

    def apply(self, x, out):
        np.multiply(x, self.negative_slope, out=out)
        self.pick(x, out, out=out)
