"""The fast global average pooling (AdaptiveAvgPool2d to 1x1, as in every squeeze-excitation block): the mean of
each plane as one matrix-vector product, the planes as rows times a column of 1 / (H*W).

BLAS's GEMV reads the planes once at full speed, where np.mean's reduction runs several times slower. It stays
on the calling thread: handing half of it to another thread costs more than it saves at the sizes
squeeze-excitation blocks pool (docs/tuning.md keeps the timings).
Other output sizes, and arrays whose planes are not rows of one matrix, run the reference.
"""

from __future__ import annotations

import functools

import numpy as np

from kuiper.cpu.registry import fast
from kuiper.layers.adaptive_pool import AdaptiveAvgPool2d


@functools.lru_cache(maxsize=64)
def mean_column(size: int, dtype: np.dtype) -> np.ndarray:
    """A (size, 1) column of 1 / size: a row times it is the row's mean."""
    column = np.full((size, 1), 1 / size, dtype)
    column.flags.writeable = False  # shared by every caller through the cache
    return column


@fast("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d")
class FastAdaptiveAvgPool2d(AdaptiveAvgPool2d):
    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if self.output_hw(x.shape) != (1, 1) or x.dtype.kind != "f" or not (x.flags.c_contiguous
                                                                               and out.flags.c_contiguous):
            super().forward_numpy(inputs, outputs)
            return
        size = x.shape[-2] * x.shape[-1]
        np.matmul(x.reshape(-1, size), mean_column(size, x.dtype), out=out.reshape(-1, 1))
