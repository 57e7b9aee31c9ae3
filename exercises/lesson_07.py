"""Lesson 7: Pooling. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 7`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import math
import numpy as np


def pooled_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """How many pooling windows fit along an axis of `size`, with PyTorch's rule for ceil_mode (a last window
    that would start in the right padding is dropped). See course_notes/07-pooling.md, "How many windows fit"."""
    raise NotImplementedError('lesson 7: write pooled_size() in exercises/lesson_07.py; '
                              'see course_notes/07-pooling.md, "How many windows fit"')


def max_pool2d(x, kernel, stride, padding, dilation, ceil_mode):
    """2-D max pooling of `x` (N, C, H, W) written as loops over output positions and kernel taps, skipping
    taps that fall in the padding. kernel, stride, padding and dilation are (height, width) pairs.
    See course_notes/07-pooling.md, exercise 1."""
    raise NotImplementedError('lesson 7: write max_pool2d() in exercises/lesson_07.py; '
                              'see course_notes/07-pooling.md, exercise 1')


def avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """2-D average pooling of `x` (N, C, H, W) as loops, with PyTorch's three divisor rules: padded positions
    counted (but not the part of a ceil_mode window past the padding), only real positions, or
    `divisor_override`. See course_notes/07-pooling.md, exercise 2."""
    raise NotImplementedError('lesson 7: write avg_pool2d() in exercises/lesson_07.py; '
                              'see course_notes/07-pooling.md, exercise 2')
