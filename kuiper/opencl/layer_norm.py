"""LayerNorm and GroupNorm on OpenCL (the layers themselves: kuiper/layers/layer_norm.py): cl/norm.cl's
norm_rows, one row of the input seen as (rows, length) to a work-group (RowGroups), its sums combined in local
memory; on CPUs the group is a single work-item, a core walking its row alone.

Both layers launch the same kernel: the mean, then the biased variance in a second pass over the row, then the
normalised row times the weight plus the bias. Only where a row's elements find their weight differs
(`channel_layout`): LayerNorm's weight runs along the row, GroupNorm's holds one value per channel.
"""

from __future__ import annotations

import math

from kuiper.layers import layer_norm
from kuiper.layers.layer_norm import AFFINE
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.reduce import RowGroups
from kuiper.opencl.registry import opencl


class OpenCLNormalization(OpenCLLayer):
    """What LayerNorm and GroupNorm share on OpenCL: the kernel, the affine attributes uploaded once, and the
    affine inputs of the functional forms read from the graph's tensors."""

    def build_opencl(self, rt):
        self.cl_rows = RowGroups(rt, "norm.cl", "norm_rows", shortest=1)
        self.cl_affine = {key: rt.upload(source) for key, source in self.affine.items() if not isinstance(source, int)}

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        count, length = self.rows(x.shape)
        buffers = []
        for key in AFFINE:
            source = self.affine.get(key)
            buffers.append(x.buffer if source is None else inputs[source].buffer if isinstance(source, int)
                           else self.cl_affine[key])
        groups, inner = self.channel_layout(x.shape)
        self.cl_rows.run(q, count, length, y.buffer, x.buffer, *buffers, int("weight" in self.affine),
                         int("bias" in self.affine), length, groups, inner, self.eps)

    def channel_layout(self, shape: tuple) -> tuple:
        """(groups, inner) for cl/norm.cl: element j of row r has weight index ((r % groups) * length + j) / inner."""
        return 1, 1


@opencl("nn.LayerNorm", "F.layer_norm")
class LayerNorm(OpenCLNormalization, layer_norm.LayerNorm):
    pass


@opencl("nn.GroupNorm", "F.group_norm")
class GroupNorm(OpenCLNormalization, layer_norm.GroupNorm):
    def channel_layout(self, shape):
        return self.num_groups, math.prod(shape[2:])
