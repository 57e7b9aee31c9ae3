"""Softmax along one dimension: exp(x) / sum(exp(x)), so the values along `dim` are positive and sum to 1.

exp overflows float32 above about 88, so the maximum along `dim` is subtracted first: the shift cancels
between numerator and denominator, and the largest exponent becomes exp(0) = 1.

The OpenCL backend (kuiper/opencl/softmax.py) computes each line along `dim` the same way, in one work-item
or, for a contiguous row, one work-group.
"""

from __future__ import annotations

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("nn.Softmax", "F.softmax")
class Softmax(Layer):
    def __init__(self, op):
        super().__init__(op)
        self.dim = self.int_param("dim")

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if not -len(shape) <= self.dim < len(shape):
            raise self.shape_error(f"dim={self.dim} is out of range for a {len(shape)}-D input {shape}")
        return [shape]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        axis = self.dim % x.ndim
        np.subtract(x, x.max(axis=axis, keepdims=True), out=out)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)

