"""Lesson 7: Pooling. Reference solutions."""

import math

import numpy as np


def pooled_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """How many pooling windows fit along an axis of `size`, with PyTorch's rule for ceil_mode (a last window
    that would start in the right padding is dropped). See course_notes/07-pooling.md, "How many windows fit"."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def max_pool2d(x, kernel, stride, padding, dilation, ceil_mode):
    """2-D max pooling of `x` (N, C, H, W) written as loops over output positions and kernel taps, skipping
    taps that fall in the padding. kernel, stride, padding and dilation are (height, width) pairs.
    See course_notes/07-pooling.md, exercise 1."""
    n, c, h, w = x.shape
    ho = pooled_size(h, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    wo = pooled_size(w, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    out = np.full((n, c, ho, wo), -np.inf, dtype=x.dtype)
    for oh in range(ho):
        for ow in range(wo):
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    y = oh * stride[0] - padding[0] + i * dilation[0]
                    z = ow * stride[1] - padding[1] + j * dilation[1]
                    if 0 <= y < h and 0 <= z < w:
                        out[:, :, oh, ow] = np.maximum(out[:, :, oh, ow], x[:, :, y, z])
    return out


def avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """2-D average pooling of `x` (N, C, H, W) as loops, with PyTorch's three divisor rules: padded positions
    counted (but not the part of a ceil_mode window past the padding), only real positions, or
    `divisor_override`. See course_notes/07-pooling.md, exercise 2."""
    n, c, h, w = x.shape
    ho = pooled_size(h, kernel[0], stride[0], padding[0], 1, ceil_mode)
    wo = pooled_size(w, kernel[1], stride[1], padding[1], 1, ceil_mode)
    out = np.zeros((n, c, ho, wo), dtype=x.dtype)
    for oh in range(ho):
        for ow in range(wo):
            y0, z0 = oh * stride[0] - padding[0], ow * stride[1] - padding[1]
            y1, z1 = min(y0 + kernel[0], h + padding[0]), min(z0 + kernel[1], w + padding[1])
            padded_count = (y1 - y0) * (z1 - z0)
            y0, z0, y1, z1 = max(y0, 0), max(z0, 0), min(y1, h), min(z1, w)
            total = x[:, :, y0:y1, z0:z1].sum(axis=(2, 3))
            if divisor_override:
                divisor = divisor_override
            elif count_include_pad:
                divisor = padded_count
            else:
                divisor = (y1 - y0) * (z1 - z0)
            out[:, :, oh, ow] = total / divisor
    return out
