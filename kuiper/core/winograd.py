"""Winograd's minimal filtering F(m x m, 3x3): the constant matrices, the kernel transform and the tiles.

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2015). F(m x m, 3x3) computes an m x m
block of a 3x3 stride-1 convolution's outputs from an a x a input tile (a = m + 2; neighbouring tiles overlap
by 2 pixels) as

    out_block = A^T [ sum over input channels of (G g G^T) * (B^T d B) ] A

with d the tile, g the 3x3 kernel, `*` the elementwise product and B, G, A small constant matrices. The
kernel transform G g G^T is done once per layer. Over all tiles and channels, the sum at each of the a*a
positions of the transformed tile is a matrix product, so the layer becomes a*a GEMMs
(Cout, Cin) @ (Cin, tiles) with (a/m)^2 / 9 of im2col's multiplies: 1/4 for F(4x4, 3x3), 4/9 for F(2x2, 3x3).
The transforms are matrix products too, B^T and A^T applied along one axis of the tiles at a time.
kuiper/cpu/conv2d.py runs them on the CPU, and says when Winograd pays there; kuiper/opencl/winograd.py
runs F(4x4, 3x3) on OpenCL.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


class Winograd:
    """The constant matrices of F(m x m, 3x3): B^T (a, a), G (a, 3) and A^T (m, a), with a = m + 2."""

    def __init__(self, m: int, bt, g, at):
        self.m, self.a = m, m + 2
        self.bt = np.array(bt, dtype=np.float32)
        self.g = np.array(g, dtype=np.float64)
        self.at = np.array(at, dtype=np.float32)

    def tiles(self, ho: int, wo: int) -> tuple:
        """(rows, columns) of m x m tiles covering an ho x wo output; the last ones may hang over its edge."""
        return -(-ho // self.m), -(-wo // self.m)

    def transform_kernel(self, weight: np.ndarray) -> np.ndarray:
        """G g G^T for every (out, in) channel pair, shaped (a*a, Cout, Cin) for the stacked GEMM."""
        u = np.einsum("pi,ocij,qj->pqoc", self.g, weight.astype(np.float64), self.g)  # float64: one rounding
        return np.ascontiguousarray(u.reshape(self.a * self.a, *weight.shape[:2]), dtype=np.float32)


# The three matrices come from interpolating polynomials at a - 1 points and infinity. F(2x2) takes Lavin &
# Gray's 0, 1, -1. For F(4x4), 0, 1, -1, 1/2, -2 (Barabasz et al., "Error analysis and improving the accuracy
# of Winograd convolution", 2020) give 2-3x less float32 error than their 0, 1, -1, 2, -2: 2e-6 to 4e-6 of the
# largest output for 64 to 512 channels, im2col's being 5e-7. B^T's rows are scaled to integers, G's to match.
F2 = Winograd(2,
              bt=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
              g=[[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
              at=[[1, 1, 1, 0], [0, 1, -1, -1]])
F4 = Winograd(4,
              bt=[[2, -3, -4, 3, 2, 0], [0, -2, 1, 5, 2, 0], [0, 2, -5, 1, 2, 0],
                  [0, -2, -1, 2, 1, 0], [0, 1, -2, -1, 2, 0], [0, 2, -3, -4, 3, 2]],
              g=[[1 / 2, 0, 0], [1 / 6, 1 / 6, 1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                 [-16 / 15, -8 / 15, -4 / 15], [1 / 30, -1 / 15, 2 / 15], [0, 0, 1 / 2]],
              at=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 1 / 2, -2, 0], [0, 1, 1, 1 / 4, 4, 0], [0, 1, -1, 1 / 8, -8, 1]])


def windows(x: np.ndarray, size: tuple, step: tuple) -> np.ndarray:
    """Every (size_h, size_w) window of x's last two axes, `step` apart: a read-only (N, C, positions_h,
    positions_w, size_h, size_w) view, no copy (Winograd's overlapping tiles). numpy's sliding_window_view
    makes the same view with all positions (sliced with ::step after), but its argument checks cost several
    times this view's time per call."""
    n, c, h, w = x.shape
    positions = ((h - size[0]) // step[0] + 1, (w - size[1]) // step[1] + 1)
    s_n, s_c, s_h, s_w = x.strides
    return as_strided(x, (n, c, *positions, *size), (s_n, s_c, s_h * step[0], s_w * step[1], s_h, s_w),
                      writeable=False)
