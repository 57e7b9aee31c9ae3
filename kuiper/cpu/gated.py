"""The numpy backend's GatedLinear (kuiper/layers/gated.py): its one product shared over kuiper's threads, into a
buffer kept between forwards."""

from __future__ import annotations

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.scratch import Scratch
from kuiper.layers import gated


class GatedLinear(gated.GatedLinear):
    keeps_workspace = True  # the product's buffer (cpu/scratch.py)

    def __init__(self, op, gate, up, act):
        super().__init__(op, gate, up, act)
        self.scratch = Scratch()

    def product_buffer(self, rows: int) -> np.ndarray:
        return self.scratch.get("product", (rows, 2 * self.out_features))

    def product(self, x: np.ndarray, both: np.ndarray) -> None:
        threads.matmul(x, self.weight_t, both)
        if self.bias is not None:
            both += self.bias
