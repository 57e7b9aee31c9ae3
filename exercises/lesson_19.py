"""Lesson 19: Choosing kernels by shape. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 19`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""


def batchnorm_group_source() -> str:
    """OpenCL C source of a fourth BatchNorm kernel, `batchnorm_group(y, x, scale, shift, hw, channels)`: one
    work-group per plane. Work-group g (get_group_id(0)) takes plane g of the N·C planes, whose channel is
    g % channels; its work-items stride over the plane's `hw` pixels, work-item l taking pixels l, l + L,
    l + 2L, ... (L = get_local_size(0)), and write y = x · scale[c] + shift[c]. Arguments: `__global float* y`,
    `__global const float* x`, `__global const float* scale`, `__global const float* shift`, `const int hw`,
    `const int channels`. See course_notes/19-kernel-variants.md, exercise 3."""
    raise NotImplementedError('lesson 19: write batchnorm_group_source() in exercises/lesson_19.py; '
                              'see course_notes/19-kernel-variants.md, exercise 3')
