"""Lesson 14: OpenCL basics. Reference solutions."""


def leaky_source() -> str:
    """OpenCL C source of a kernel `leaky(y, x, n, slope)`: y[i] = x[i] where x[i] > 0, else slope · x[i],
    for i < n, one work-item per element, with the bounds check that lets the host round the global size up.
    Arguments: `__global float* y`, `__global const float* x`, `const int n`, `const float slope`.
    See course_notes/14-opencl-basics.md, exercise 1."""
    return """
__kernel void leaky(__global float* y, __global const float* x, const int n, const float slope) {
    const int i = get_global_id(0);
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}
"""
