"""Lesson 19: Choosing kernels by shape. Reference solutions."""


def batchnorm_group_source() -> str:
    """OpenCL C source of a fourth BatchNorm kernel, `batchnorm_group(y, x, scale, shift, hw, channels)`: one
    work-group per plane. Work-group g (get_group_id(0)) takes plane g of the N·C planes, whose channel is
    g % channels; its work-items stride over the plane's `hw` pixels, work-item l taking pixels l, l + L,
    l + 2L, ... (L = get_local_size(0)), and write y = x · scale[c] + shift[c]. Arguments: `__global float* y`,
    `__global const float* x`, `__global const float* scale`, `__global const float* shift`, `const int hw`,
    `const int channels`. See course_notes/19-kernel-variants.md, exercise 3."""
    return """
__kernel void batchnorm_group(__global float* y, __global const float* x, __global const float* scale,
                              __global const float* shift, const int hw, const int channels) {
    const int plane = get_group_id(0);
    const int c = plane % channels;
    const float a = scale[c], b = shift[c];
    const int base = plane * hw;
    for (int i = get_local_id(0); i < hw; i += get_local_size(0)) y[base + i] = x[base + i] * a + b;
}
"""
