"""Lesson 16: Fast convolution in OpenCL. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 16`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""


def gemm4_source() -> str:
    """OpenCL C source of a kernel `gemm4(C, A, B, M, N, K)` computing C = A @ B for row-major A (M x K),
    B (K x N) and C (M x N), where each work-item computes four neighbouring elements of one row of C:
    work-item (i, m) of a global size (ceil(N / 4), M) computes C[m, 4i] ... C[m, 4i + 3], so each value of A it
    loads feeds four multiply-adds. Columns past N are neither read nor written. Arguments:
    `__global float* C`, `__global const float* A`, `__global const float* B`, `const int M`, `const int N`,
    `const int K`. See course_notes/16-fast-conv-opencl.md, exercise 1."""
    raise NotImplementedError('lesson 16: write gemm4_source() in exercises/lesson_16.py; '
                              'see course_notes/16-fast-conv-opencl.md, exercise 1')
