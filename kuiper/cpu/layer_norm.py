"""The numpy backend's LayerNorm: the reference's two passes over bands of rows, which kuiper's threads share.

numpy reduces along a short last axis slowly, so the means are matrix-vector products by a column of 1/length
instead and the sums of squares one einsum, several times faster than the reference on rows as short as Swin's
(docs/tuning.md).

Each row's mean, then its scale, goes into one column kept between forwards (kuiper/cpu/scratch.py) rather
than new arrays: 4 bytes a row, past 64 KiB from 16,384 rows on (Swin-T's first stage at batch 6).
"""

from __future__ import annotations

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.cpu.scratch import KeepsScratch
from kuiper.layers import layer_norm

#: each thread's band holds at least this many elements, to pay for the hand-over (see cpu/threads.py)
PART_ELEMENTS = 1 << 16


@fast("nn.LayerNorm", "F.layer_norm")
class LayerNorm(KeepsScratch, layer_norm.LayerNorm):
    def workspace_bytes(self, input_shapes):
        return 4 * self.rows(tuple(input_shapes[0]))[0]

    def forward_numpy(self, inputs, outputs):
        if not outputs[0].flags.c_contiguous:  # its rows as a matrix would be a copy, the results lost
            super().forward_numpy(inputs, outputs)
            return
        count, length = self.rows(inputs[0].shape)
        rows, out = inputs[0].reshape(count, length), outputs[0].reshape(count, length)
        weight, bias = (None if a is None else a.reshape(length) for a in self.affine_arrays(inputs))
        stats = self.scratch.get("stats", (count, 1))
        # a row times it is the row's mean. Made anew each call (a few KiB): that timed no slower than one made
        # once and kept (docs/tuning.md)
        mean_of = np.full((length, 1), 1 / length, np.float32)

        def band(first, stop, _):
            x, y, s = rows[first:stop], out[first:stop], stats[first:stop]
            np.matmul(x, mean_of, out=s)
            np.subtract(x, s, out=y)
            np.einsum("ij,ij->i", y, y, out=s[:, 0])  # the means are used up: the sums of squares replace them
            s *= 1 / length
            s += self.eps
            np.sqrt(s, out=s)
            y /= s
            if weight is not None:
                y *= weight
            if bias is not None:
                y += bias

        threads.parallel(band, count, grain=-(-PART_ELEMENTS // max(1, length)))
