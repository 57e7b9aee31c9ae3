"""Lesson 13: The fast CPU path. Reference solutions."""

import numpy as np


def f23():
    """Winograd's F(2, 3) as three matrices (BT, G, AT) of shapes (4, 4), (4, 3) and (2, 4), such that for
    four inputs d and a 3-tap filter g, AT @ ((G @ g) * (BT @ d)) gives the two outputs
    [d[0:3] @ g, d[1:4] @ g] with four multiplications. Derive them from the points 0, 1, -1 and infinity.
    See course_notes/13-fast-cpu.md, exercise 3."""
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
    return bt, g, at


def winograd_conv3x3(x, w, f):
    """A 3x3 convolution at stride 1 with padding 1 of one image `x` (C, H, W) by `w` (Cout, C, 3, 3), computed
    with the Winograd matrices of `f` (kuiper.core.winograd.F2 or F4: f.m outputs per tile side, f.a = f.m + 2,
    f.bt, f.g, f.at): the kernel transformed once, U = G g Gᵀ; every a x a tile of the padded input (tiles m
    apart, the last ones hanging over the edge into zeros) transformed, V = Bᵀ d B; the sum over input
    channels of U ⊙ V taken in the transformed domain; Aᵀ (...) A gives each m x m block of the output,
    (Cout, H, W). See course_notes/13-fast-cpu.md, "From one tile to a layer"."""
    c, h, wd = x.shape
    m, a = f.m, f.a
    th, tw = -(-h // m), -(-wd // m)
    padded = np.zeros((c, th * m + 2, tw * m + 2))
    padded[:, 1:h + 1, 1:wd + 1] = x
    u = np.einsum("ai,ocij,bj->ocab", f.g, w.astype(np.float64), f.g)
    out = np.empty((w.shape[0], th * m, tw * m))
    for ty in range(th):
        for tx in range(tw):
            d = padded[:, ty * m:ty * m + a, tx * m:tx * m + a]
            v = np.einsum("ai,cij,bj->cab", f.bt, d, f.bt)
            summed = np.einsum("ocab,cab->oab", u, v)
            out[:, ty * m:(ty + 1) * m, tx * m:(tx + 1) * m] = np.einsum("ia,oab,jb->oij", f.at, summed, f.at)
    return out[:, :h, :wd].astype(np.float32)
