"""torch.roll on OpenCL (the op: kuiper/layers/roll.py), with no kernel of its own: along one dim, a roll by s
(taken into 0 <= s < n) moves two blocks, the last s elements to the front and the first n - s after them;
over k dims, every combination of those blocks moves, 2^k strided copies (cl/copy.cl; 4 for a swin window),
each between a view of the input and one of the output. A roll without dims rolls the flat tensor: one dim."""

from __future__ import annotations

import itertools

from kuiper.layers import roll
from kuiper.layers.slice import indexed_shape
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import StridedCopy, sliced


@opencl("torch.roll")
class Roll(OpenCLLayer, roll.Roll):
    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if self.dims is None:
            x, out = x.reshape(-1), out.reshape(-1)
        offsets = self.offsets(x.shape)
        # per dim, the blocks it moves as (where they land, where they come from)
        moves = [[(slice(s, None), slice(None, n - s)), (slice(None, s), slice(n - s, None))] if s
                 else [(slice(None), slice(None))] for n, s in zip(x.shape, offsets)]
        for blocks in itertools.product(*moves):
            to, source = zip(*blocks)
            self.copier(q, indexed_shape(x.shape, to), sliced(out, to), sliced(x, source))
