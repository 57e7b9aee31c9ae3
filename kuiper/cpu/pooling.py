"""The fast max and average pooling: the channel planes, which pool independently, shared over kuiper's threads."""

from __future__ import annotations

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.layers.pooling import AvgPool2d, MaxPool2d, Pool2d

#: each of kuiper's threads pools planes holding at least this many input elements (see cpu/threads.py)
PART_ELEMENTS = 1 << 18


class PlaneSplit(Pool2d):
    """The split, for either pooling: put it before the reference class in the bases."""

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if not out.flags.c_contiguous:  # its planes would not be views
            super().forward_numpy(inputs, outputs)
            return
        x_planes, out_planes = x.reshape(-1, *x.shape[-2:]), out.reshape(-1, *out.shape[-2:])
        threads.parallel(lambda first, stop, _: self.pool_planes(x_planes[first:stop], out_planes[first:stop]),
                         len(out_planes), grain=-(-PART_ELEMENTS // (x.shape[-2] * x.shape[-1])))


@fast("nn.MaxPool2d", "F.max_pool2d")
class FastMaxPool2d(PlaneSplit, MaxPool2d):
    def pool_planes(self, x, out):
        """Along H first, then W: the pass along W, whose taps are strided views of each row, then reads only
        the rows H left (docs/tuning.md). A maximum is the same in either order."""
        columns = np.empty(x.shape[:-2] + out.shape[-2:-1] + x.shape[-1:], dtype=x.dtype)
        self.pool_axis(columns, x, -2)
        self.pool_axis(out, columns, -1)


@fast("nn.AvgPool2d", "F.avg_pool2d")
class FastAvgPool2d(PlaneSplit, AvgPool2d):
    pass
