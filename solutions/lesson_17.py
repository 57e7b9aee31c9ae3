"""Lesson 17: More models. Reference solutions."""

import math

import numpy as np


def upsample_nearest(x, scale):
    """Nearest upsampling of `x` (N, C, H, W) by `scale` (sh, sw): the output is floor(H·sh) x floor(W·sw),
    and output pixel o of an axis copies input pixel floor(o / s). See course_notes/17-more-models.md,
    "Upsample: nearest and bilinear"."""
    rows = np.floor(np.arange(math.floor(x.shape[2] * scale[0])) / scale[0]).astype(int)
    cols = np.floor(np.arange(math.floor(x.shape[3] * scale[1])) / scale[1]).astype(int)
    return x[:, :, np.minimum(rows, x.shape[2] - 1)][:, :, :, np.minimum(cols, x.shape[3] - 1)]


def _taps(size, scale, align_corners):
    out = math.floor(size * scale)
    o = np.arange(out, dtype=np.float64)
    if align_corners:
        source = o * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
    else:
        source = np.maximum((o + 0.5) / scale - 0.5, 0.0)
    first = np.minimum(np.floor(source).astype(int), size - 1)
    return first, np.minimum(first + 1, size - 1), source - first


def upsample_bilinear(x, scale, align_corners):
    """Bilinear upsampling of `x` (N, C, H, W) by `scale` (sh, sw) to floor(H·sh) x floor(W·sw), as PyTorch's
    nn.Upsample(mode="bilinear"): output pixel o of an axis sits at (o + 0.5) / s - 0.5 input pixels (positions
    before the first centre read the first pixel), or with align_corners at o · (in - 1) / (out - 1), and blends
    the two input pixels either side by closeness, along rows and then along columns.
    See course_notes/17-more-models.md, exercise 1."""
    top, bottom, fy = _taps(x.shape[2], scale[0], align_corners)
    left, right, fx = _taps(x.shape[3], scale[1], align_corners)
    x = x.astype(np.float64)
    rows = x[:, :, top] * (1 - fy)[:, None] + x[:, :, bottom] * fy[:, None]
    return (rows[..., left] * (1 - fx) + rows[..., right] * fx).astype(np.float32)
