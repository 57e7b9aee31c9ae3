"""Softmax on OpenCL (the layer itself: kuiper/layers/softmax.py), in cl/softmax.cl.

The input is viewed as (outer, length, inner), `length` being the size of `dim`, and softmax_lines gives one
work-item a whole line. A line that is a contiguous row (`dim` innermost, as in attention) goes instead to a
work-group, softmax_rows (RowGroups): on a GPU the group reads it unit-stride and reduces in local memory, from
rows of 32 on; on a CPU the group is one work-item, which walks the row eight elements at a time
(cl/group_softmax.h), at any length.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers import softmax
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.reduce import RowGroups
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up


@opencl("nn.Softmax", "F.softmax")
class Softmax(OpenCLLayer, softmax.Softmax):
    def build_opencl(self, rt):
        self.cl_lines = rt.kernel("softmax.cl", "softmax_lines")
        # softmax reads a row three times: on a GPU, rows of 32 and more in a group's unit-stride reads; on a CPU
        # a row alone, in float8 steps, rather than a work-item per line (docs/tuning.md)
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
