"""The numpy backend's Int8Linear (the layer itself: kuiper/layers/int8_linear.py): the int8 weights widened block by
block of output rows into a small float32 scratch that stays in the core's cache, never as a whole matrix, each
block's rows shared over kuiper's threads.

A block of ROWS weight rows is copied into float32 (numpy widens int8 at several gigabytes a second), then:

* few input rows (decode): the scales are applied to the products, not the weights. Seen as (groups, rows, GROUP),
  the block times each group's slice of x is one batched product (groups, rows, tokens); those get their scale
  and are summed over the groups. Scaling every weight instead costs a pass over the block that takes longer
  than the product itself (numpy's broadcast over groups of 32 runs in short inner loops).
* many input rows (prefill): the block is scaled in place, then one GEMM of all the tokens by the block; the
  pass over the weights is paid once for many tokens.

docs/performance.md has the timings behind ROWS and MANY_TOKENS.
"""

from __future__ import annotations

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.cpu.scratch import KeepsScratch
from kuiper.layers import int8_linear

#: weight rows widened to float32 at a time: a block that stays in a core's L2 while it is multiplied
#: (docs/tuning.md)
ROWS = 128
#: from this many tokens on, a block is scaled once and multiplied as one GEMM
MANY_TOKENS = 8


@fast("kuiper.Int8Linear")
class Int8Linear(KeepsScratch, int8_linear.Int8Linear):
    def __init__(self, op):
        super().__init__(op)
        self.count = int8_linear.groups(self.in_features, self.group_size)
        self.padded = self.count * self.group_size
        self.scales_t = np.ascontiguousarray(self.scales.T)  # (groups, out): a block's scales per group

    def joined(self, linears: list, op) -> "Int8Linear":
        layer = super().joined(linears, op)
        layer.scales_t = np.ascontiguousarray(layer.scales.T)
        return layer

    def workspace_bytes(self, input_shapes):
        tokens = int(np.prod(input_shapes[0][:-1], dtype=np.int64))
        per_thread = ROWS * self.padded + tokens * self.padded + self.count * ROWS * tokens + ROWS * tokens
        return 4 * threads.num_threads() * per_thread

    def forward_numpy(self, inputs, outputs):
        x, out = self.rows(inputs[0], outputs[0])
        tokens, g = len(x), self.group_size
        many = tokens >= MANY_TOKENS
        if not many:  # the tokens by group, zero past in_features: (groups, GROUP, tokens)
            padded = self.scratch.get("x", (tokens, self.padded))
            padded[:, :self.in_features] = x
            xg = padded.reshape(tokens, self.count, g).transpose(1, 2, 0)

        def part(first, stop, worker):
            block = self.scratch.get(f"w{worker}", (ROWS, self.padded))  # zero past in_features, never written
            for top in range(first, stop, ROWS):
                rows = min(ROWS, stop - top)
                w = block[:rows]
                np.copyto(w[:, :self.in_features], self.qweight[top:top + rows], casting="unsafe")
                if many:
                    w.reshape(rows, self.count, g)[...] *= self.scales[top:top + rows, :, None]
                    np.matmul(x, w[:, :self.in_features].T, out=out[:, top:top + rows])
                    continue
                products = self.scratch.get(f"p{worker}", (self.count, ROWS, tokens))[:, :rows]
                np.matmul(w.reshape(rows, self.count, g).transpose(1, 0, 2), xg, out=products)
                products *= self.scales_t[:, top:top + rows, None]
                sums = self.scratch.get(f"s{worker}", (ROWS, tokens))[:rows]
                np.sum(products, axis=0, out=sums)
                out[:, top:top + rows] = sums.T

        threads.parallel(part, self.out_features, grain=ROWS)
        self.add_bias(out)
