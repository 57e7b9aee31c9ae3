"""Softmax along one dimension: exp(x) / sum(exp(x)), so the values along `dim` are positive and sum to 1.

exp overflows float32 above about 88, so the maximum along `dim` is subtracted first: the shift cancels
between numerator and denominator, and the largest exponent becomes exp(0) = 1.

On OpenCL (cl/softmax.cl) the input is viewed as (outer, length, inner), `length` being the size of `dim`,
and one work-item computes a whole line. A line that is a contiguous row (`dim` innermost, as in attention)
goes instead to a work-group: on a GPU the group reads it unit-stride and reduces in local memory; on a CPU
the group is one work-item, which walks the row eight elements at a time (cl/group_softmax.h).
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.opencl.reduce import RowGroups
from kuiper.layers.registry import register
from kuiper.opencl import round_up


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

    # ---- OpenCL ---------------------------------------------------------------------------------------
    def build_opencl(self, rt):
        self.cl_lines = rt.kernel("softmax.cl", "softmax_lines")
        # softmax reads a row three times: from 32 on, a group's unit-stride reads won by 2x and more (H100).
        # On a CPU a row alone in float8 steps: 0.14 ms for MaxViT-T's (64, 2, 49, 49) scores, against 1.0 with a
        # work-item per line (Debian PoCL, Zen 4)
        self.cl_rows = RowGroups(rt, "softmax.cl", "softmax_rows", shortest=1 if rt.is_cpu else 32)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        axis = self.dim % x.ndim
        outer, length, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
        if self.cl_rows and inner == 1 and self.cl_rows.takes(length):
            self.cl_rows.run(q, outer, length, y.buffer, x.buffer, np.int32(length))
        else:
            n = outer * inner
            q.run(self.cl_lines, (round_up(n, 256),), None,
                  y.buffer, x.buffer, np.int32(n), np.int32(length), np.int32(inner))
