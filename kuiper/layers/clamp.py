"""Clamp (torch.clamp): x limited to [min, max], where either bound may be absent.

pnnx writes `torch.clamp min=... max=...`, with `None` for a bound the model left out.
"""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("torch.clamp")
class Clamp(ElementwiseLayer):
    def __init__(self, op):
        super().__init__(op)
        # an infinite bound is as good as none
        self.min = None if self.param("min", None) is None else self.float_param("min", finite=False)
        self.max = None if self.param("max", None) is None else self.float_param("max", finite=False)
        if self.min is None and self.max is None:
            raise self.error("needs at least one of min and max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise self.error(f"min={self.min} is greater than max={self.max}")

    in_place = True

    def apply(self, x, out):
        np.clip(x, self.min, self.max, out=out)
