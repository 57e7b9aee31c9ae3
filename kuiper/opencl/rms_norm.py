"""RMSNorm on OpenCL (the layer itself: kuiper/layers/rms_norm.py): cl/norm.cl's rms_rows, one row of the input
seen as (rows, length) to a work-group (RowGroups), as LayerNorm's norm_rows; on CPUs the group is a single
work-item, a core walking its row alone.

The sum of squares is taken in float whatever the storage (cl/store.h), as the reference takes it in float32:
with fp16 storage the row's elements are half, but their squares never are.
"""

from __future__ import annotations

import math

from kuiper.layers import rms_norm
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.reduce import RowGroups
from kuiper.opencl.registry import opencl


@opencl("nn.RMSNorm", "F.rms_norm")
class RMSNorm(OpenCLLayer, rms_norm.RMSNorm):
    def build_opencl(self, rt):
        self.cl_rows = RowGroups(rt, "norm.cl", "rms_rows", shortest=1)
        self.cl_weight = None if self.scale is None else rt.upload(self.scale)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        length = math.prod(self.normalized_shape)
        weight = inputs[self.weight_slot].buffer if self.weight_slot is not None else self.cl_weight
        # without a weight the kernel is handed x's buffer, which it never reads as one (has_weight = 0)
        self.cl_rows.run(q, x.size // length, length, y.buffer, x.buffer, x.buffer if weight is None else weight,
                         int(weight is not None), length, self.eps)
