"""SplitHeads on OpenCL (the layer itself: kuiper/layers/heads.py): cl/rotary.cl's split_heads cuts up to three
pieces of the projection into their heads in one launch, one work-item per coordinate pair and token, the angle
worked out once for every head it turns (as cl/rotary.cl's rotary does). An attention block's q, k and v: one
launch where the graph as written makes five."""

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
        self.cl_split = IndexKernels(rt, "rotary.cl", "split_heads")
        rotary = next((r for r in self.rotaries if r is not None), None)
        pairs = np.zeros(self.head_dim) if rotary is None else turn_pairs(rotary.inv_freq)
        self.cl_turns = rt.upload(pairs.astype(np.float32).view(np.uint32))

    def forward_opencl(self, q, inputs, outputs):
        x = inputs[0]
        batch, tokens, width = x.shape
        if not x.size:  # OpenCL refuses an empty range
            return
        positions = inputs[1] if self.rotated else x  # never read where nothing turns
        kernel = self.cl_split[positions.dtype if self.rotated else np.dtype(np.int64)]
        pieces = [(out.buffer, first, n, int(rotary is not None))
                  for out, first, n, rotary in zip(outputs, self.firsts, self.heads, self.rotaries)]
        for at in range(0, len(pieces), PIECES_A_LAUNCH):
            group = pieces[at:at + PIECES_A_LAUNCH]
            group += [(group[0][0], 0, 0, 0)] * (PIECES_A_LAUNCH - len(group))  # a piece of no heads does nothing
            q.run(kernel, (self.head_dim // 2, tokens), None, x.buffer, positions.buffer, self.cl_turns, batch,
                  tokens, width, self.head_dim // 2, *[arg for piece in group for arg in piece])
