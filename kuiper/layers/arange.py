"""torch.arange: the numbers start, start + step, ... up to end (excluded), e.g. the positions 0..n-1 of a
sequence that a text model's position embedding looks up.

pnnx usually folds an arange with constant bounds into a pnnx.Attribute; where it keeps the operator, the bounds
are parameters (start, end, step) and `dtype` names the element type (torch.long, torch.float, ...; None gives
int64 when every bound is an int, as PyTorch does, else float32). Bounds computed at run time (inputs) are a
dynamic-shape export, which kuiper refuses as Tensor.reshape does: export at fixed shapes.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

DTYPES = {"torch.long": np.int64, "torch.int": np.int32, "torch.float": np.float32, "torch.double": np.float32,
          "torch.half": np.float32}  # kuiper computes floats in float32


@register("torch.arange")
class Arange(Layer):
    num_inputs, min_inputs = None, 0  # counted in __init__, to explain the form with tensor bounds

    def __init__(self, op):
        super().__init__(op)
        if op.input_operands:
            raise self.error("takes its bounds from tensor inputs (a dynamic-shape export); export with fixed input "
                             "shapes so that pnnx writes start=, end= and step=")
        self.start = self.float_param("start", 0)
        self.end = self.float_param("end")
        self.step = self.float_param("step", 1)
        if self.step == 0:
            raise self.error("step must not be 0")
        dtype = self.param("dtype", None)
        if dtype is None:
            whole = all(isinstance(self.param(k, 0), int) for k in ("start", "end", "step"))
            self.dtype = np.dtype(np.int64 if whole else np.float32)
        else:
            self.dtype = np.dtype(DTYPES[self.str_param("dtype", choices=tuple(DTYPES))])
        self.count = max(math.ceil((self.end - self.start) / self.step), 0)
        if self.count < 1:
            raise self.error(f"start={self.start}, end={self.end}, step={self.step} give no numbers")

    def output_shapes(self, input_shapes):
        return [(self.count,)]

    def output_dtypes(self, input_dtypes):
        return [self.dtype]

    def forward_numpy(self, inputs, outputs):
        # start + i * step, as PyTorch computes each element (a running sum would drift for float steps)
        outputs[0][...] = self.start + np.arange(self.count, dtype=np.float64) * self.step
