"""Lesson 26: Weight quantization. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 26`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or the definitions in the notes.
"""

import numpy as np


def quantize_groups(w, group: int = 32):
    """Symmetric int8 quantization of a float matrix `w` (out, in) per group of `group` consecutive inputs of
    each row (the last group shorter where `group` does not divide `in`): returns (q, scales), q int8 (out, in)
    with q = round(w / scale) (numpy's rint, halves to even), scales float32 (out, groups) with
    scale = max |w| / 127 over the group; an all-zero group has scale 0 and q 0.
    See course_notes/26-quantization.md, exercise 1."""
    raise NotImplementedError('lesson 26: write quantize_groups() in exercises/lesson_26.py; '
                              'see course_notes/26-quantization.md, exercise 1')


def dequantize_groups(q, scales, group: int = 32):
    """The float32 weights (out, in) that int8 `q` and its `scales` (out, groups) stand for: q * scale, each
    weight by its group's scale. See course_notes/26-quantization.md, exercise 2."""
    raise NotImplementedError('lesson 26: write dequantize_groups() in exercises/lesson_26.py; '
                              'see course_notes/26-quantization.md, exercise 2')


def int8_matvec(q, scales, x, group: int = 32):
    """y = W x (out,) float32 for W = dequantize_groups(q, scales, group) and a vector x (in,), computed group by
    group: y_n = sum over groups g of scales[n, g] * (q[n, g's inputs] . x[g's inputs]), without building the
    float matrix W. See course_notes/26-quantization.md, exercise 3."""
    raise NotImplementedError('lesson 26: write int8_matvec() in exercises/lesson_26.py; '
                              'see course_notes/26-quantization.md, exercise 3')


def quantized_bytes(shapes, group: int = 32) -> int:
    """The bytes that Linear weights of these (out, in) shapes take quantized: one byte per weight, and a
    float32 scale (4 bytes) per group of `group` inputs of each row, a shorter last group included.
    See course_notes/26-quantization.md, exercise 4."""
    raise NotImplementedError('lesson 26: write quantized_bytes() in exercises/lesson_26.py; '
                              'see course_notes/26-quantization.md, exercise 4')
