"""Lesson 8: Convolution. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 8`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import numpy as np


def im2col(xp, kernel, stride=(1, 1), dilation=(1, 1)):
    """The column matrix of one padded image `xp` (C, Hp, Wp) for a kernel of `kernel` (kh, kw) taps at
    `stride` and `dilation`: shape (C·kh·kw, Ho·Wo), row (c, i, j) holding what tap (i, j) of channel c reads
    at every output position, in row-major order of (c, i, j) and of (oh, ow).
    See course_notes/08-convolution.md, exercise 1."""
    raise NotImplementedError('lesson 8: write im2col() in exercises/lesson_08.py; '
                              'see course_notes/08-convolution.md, exercise 1')


def conv2d(x, w, b, stride, padding, dilation, groups):
    """A convolution of `x` (N, Cin, H, W) by `w` (Cout, Cin/groups, kh, kw) plus `b` (Cout,) or None, as
    im2col and one matrix product per group and image. stride, padding and dilation are (height, width)
    pairs. See course_notes/08-convolution.md, exercise 2."""
    raise NotImplementedError('lesson 8: write conv2d() in exercises/lesson_08.py; '
                              'see course_notes/08-convolution.md, exercise 2')


def conv_macs(graph, input_shape) -> int:
    """The multiply-accumulates of all nn.Conv2d operators of `graph` (a built kuiper.RuntimeGraph) for
    `input_shape`: N·Cout·Ho·Wo·(Cin/groups)·kh·kw each, the output shapes from graph.plan_for(input_shape)
    and the sizes from each operator's params. See course_notes/08-convolution.md, exercise 3."""
    raise NotImplementedError('lesson 8: write conv_macs() in exercises/lesson_08.py; '
                              'see course_notes/08-convolution.md, exercise 3')
