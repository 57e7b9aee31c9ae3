"""Lesson 14: OpenCL basics. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 14`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""


def leaky_source() -> str:
    """OpenCL C source of a kernel `leaky(y, x, n, slope)`: y[i] = x[i] where x[i] > 0, else slope · x[i],
    for i < n, one work-item per element, with the bounds check that lets the host round the global size up.
    Arguments: `__global float* y`, `__global const float* x`, `const int n`, `const float slope`.
    See course_notes/14-opencl-basics.md, exercise 1."""
    raise NotImplementedError('lesson 14: write leaky_source() in exercises/lesson_14.py; '
                              'see course_notes/14-opencl-basics.md, exercise 1')
