"""Lesson 17: More models. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 17`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import math
import numpy as np


def upsample_nearest(x, scale):
    """Nearest upsampling of `x` (N, C, H, W) by `scale` (sh, sw): the output is floor(H·sh) x floor(W·sw),
    and output pixel o of an axis copies input pixel floor(o / s). See course_notes/17-more-models.md,
    "Upsample: nearest and bilinear"."""
    raise NotImplementedError('lesson 17: write upsample_nearest() in exercises/lesson_17.py; '
                              'see course_notes/17-more-models.md, "Upsample: nearest and bilinear"')


def upsample_bilinear(x, scale, align_corners):
    """Bilinear upsampling of `x` (N, C, H, W) by `scale` (sh, sw) to floor(H·sh) x floor(W·sw), as PyTorch's
    nn.Upsample(mode="bilinear"): output pixel o of an axis sits at (o + 0.5) / s - 0.5 input pixels (positions
    before the first centre read the first pixel), or with align_corners at o · (in - 1) / (out - 1), and blends
    the two input pixels either side by closeness, along rows and then along columns.
    See course_notes/17-more-models.md, exercise 1."""
    raise NotImplementedError('lesson 17: write upsample_bilinear() in exercises/lesson_17.py; '
                              'see course_notes/17-more-models.md, exercise 1')
