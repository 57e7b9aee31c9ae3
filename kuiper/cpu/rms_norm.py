"""The numpy backend's RMSNorm: each row's sum of squares as one einsum, with no squared copy of the input, and
the rows divided straight into the output; bands of rows shared by kuiper's threads (kuiper/cpu/threads.py).

The reference squares the whole input into a new array, takes the mean of that, and divides into another new
array before copying it to the output: three passes' worth of allocation for what is one read and one write.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.layers import rms_norm

#: each thread's band holds at least this many elements, to pay for the hand-over (see cpu/threads.py)
PART_ELEMENTS = 1 << 16


@fast("nn.RMSNorm", "F.rms_norm")
class RMSNorm(rms_norm.RMSNorm):
    def forward_numpy(self, inputs, outputs):
        if not outputs[0].flags.c_contiguous:  # its rows as a matrix would be a copy, the results lost
            super().forward_numpy(inputs, outputs)
            return
        length = math.prod(self.normalized_shape)
        count = inputs[0].size // length
        rows, out = inputs[0].reshape(count, length), outputs[0].reshape(count, length)
        weight = self.scale if self.weight_slot is None else inputs[self.weight_slot]
        weight = None if weight is None else weight.reshape(length)
        shift = np.float32(self.eps)

        def band(first, stop, _):
            x, y = rows[first:stop], out[first:stop]
            roots = np.einsum("ij,ij->i", x, x)  # sums of squares, a float per row
            roots *= np.float32(1 / length)
            roots += shift
            np.sqrt(roots, out=roots)
            np.divide(x, roots[:, None], out=y)
            if weight is not None:
                y *= weight

        threads.parallel(band, count, grain=-(-PART_ELEMENTS // length))
