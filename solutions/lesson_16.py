"""Lesson 16: Fast convolution in OpenCL. Reference solutions."""


def gemm4_source() -> str:
    """OpenCL C source of a kernel `gemm4(C, A, B, M, N, K)` computing C = A @ B for row-major A (M x K),
    B (K x N) and C (M x N), where each work-item computes four neighbouring elements of one row of C:
    work-item (i, m) of a global size (ceil(N / 4), M) computes C[m, 4i] ... C[m, 4i + 3], so each value of A it
    loads feeds four multiply-adds. Columns past N are neither read nor written. Arguments:
    `__global float* C`, `__global const float* A`, `__global const float* B`, `const int M`, `const int N`,
    `const int K`. See course_notes/16-fast-conv-opencl.md, exercise 1."""
    return """
__kernel void gemm4(__global float* C, __global const float* A, __global const float* B,
                    const int M, const int N, const int K) {
    const int n = 4 * get_global_id(0), m = get_global_id(1);
    if (m >= M || n >= N) return;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int width = N - n < 4 ? N - n : 4;
    for (int k = 0; k < K; ++k) {
        const float a = A[m * K + k];
        for (int j = 0; j < width; ++j) acc[j] += a * B[k * N + n + j];
    }
    for (int j = 0; j < width; ++j) C[m * N + n + j] = acc[j];
}
"""
