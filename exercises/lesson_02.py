"""Lesson 2: Tensors. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 2`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import numpy as np


def offset(shape, index) -> int:
    """The position of element `index` in the flat row-major buffer of an array of `shape` (any rank), in
    elements, computed without numpy. See course_notes/02-tensor.md, exercise 1."""
    raise NotImplementedError('lesson 2: write offset() in exercises/lesson_02.py; '
                              'see course_notes/02-tensor.md, exercise 1')


def strides(shape, itemsize: int) -> tuple:
    """The byte strides of a row-major (C order) array of `shape` whose elements take `itemsize` bytes:
    how far memory moves when each index grows by one. See course_notes/02-tensor.md, "Row-major layout
    and strides"."""
    raise NotImplementedError('lesson 2: write strides() in exercises/lesson_02.py; '
                              'see course_notes/02-tensor.md, "Row-major layout and strides"')


def pad(x: np.ndarray, pads, value: float = 0.0) -> np.ndarray:
    """A new array: `x` (rank 2 or more) with rows and columns of `value` added around each of its last two
    axes, `pads` in KuiperInfer's order (top, bottom, left, right). Allocate the result with np.full and
    assign `x` into it with one slice. See course_notes/02-tensor.md, exercise 3."""
    raise NotImplementedError('lesson 2: write pad() in exercises/lesson_02.py; '
                              'see course_notes/02-tensor.md, exercise 3')
