"""SplitHeads on OpenCL (the layer itself: kuiper/layers/heads.py): cl/rotary.cl's split_heads cuts up to three
pieces of the projection into their heads in one launch, one work-item per coordinate pair and token, the angle
worked out once for every head it turns (as cl/rotary.cl's rotary does). An attention block's q, k and v: one
launch where the graph as written makes five (seven with Qwen3's norms of q's and k's heads, which a build with
-DNORMED applies: a work-group a token, whose pairs add up each head's squares)."""

from __future__ import annotations

import numpy as np

from kuiper.layers import heads
from kuiper.opencl.indices import IndexKernels
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.rotary import turn_pairs

#: the pieces one launch of split_heads cuts
PIECES_A_LAUNCH = 3


class SplitHeads(OpenCLLayer, heads.SplitHeads):
    def build_opencl(self, rt):
        normed = [n for n in self.norms if n is not None]
        options = [f"-DNORMED={self.head_dim // 2}"] if normed else []
        self.cl_split = IndexKernels(rt, "rotary.cl", "split_heads", options)
        self.cl_eps = np.float32(normed[0].eps if normed else 0.0)
        self.cl_group = (self.head_dim // 2, 1) if normed else None  # normed: a work-group a token
        rotary = next((r for r in self.rotaries if r is not None), None)
        # the table: the turns of each pair, then each normed piece's weights (ones where its norm has none)
        table = [np.zeros(self.head_dim) if rotary is None else turn_pairs(rotary.inv_freq)]
        self.cl_scale_at = []
        for norm in self.norms:
            self.cl_scale_at.append(sum(map(len, table)) if norm is not None else -1)
            if norm is not None:
                table.append(np.ones(self.head_dim) if norm.scale is None else norm.scale.reshape(-1))
        self.cl_table = rt.upload(np.concatenate(table).astype(np.float32).view(np.uint32))

    def forward_opencl(self, q, inputs, outputs):
        x = inputs[0]
        batch, tokens, width = x.shape
        if not x.size:  # OpenCL refuses an empty range
            return
        positions = inputs[1] if self.rotated else x  # never read where nothing turns
        kernel = self.cl_split[positions.dtype if self.rotated else np.dtype(np.int64)]
        pieces = [(out.buffer, first, n, int(rotary is not None), scale_at)
                  for out, first, n, rotary, scale_at in zip(outputs, self.firsts, self.heads, self.rotaries,
                                                             self.cl_scale_at)]
        pairs = self.head_dim // 2
        for at in range(0, len(pieces), PIECES_A_LAUNCH):
            group = pieces[at:at + PIECES_A_LAUNCH]
            group += [(group[0][0], 0, 0, 0, -1)] * (PIECES_A_LAUNCH - len(group))  # a piece of no heads: nothing
            q.run(kernel, (pairs, tokens), self.cl_group, x.buffer, positions.buffer, self.cl_table, batch, tokens,
                  width, pairs, self.cl_eps, *[arg for piece in group for arg in piece])
