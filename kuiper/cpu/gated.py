"""The numpy backend's GatedLinear (kuiper/layers/gated.py): its one product shared over kuiper's threads."""

from __future__ import annotations

import numpy as np

from kuiper.cpu import threads
from kuiper.layers import gated


class GatedLinear(gated.GatedLinear):
    def product(self, x: np.ndarray, both: np.ndarray) -> None:
        threads.matmul(x, self.weight_t, both)
        if self.bias is not None:
            both += self.bias
