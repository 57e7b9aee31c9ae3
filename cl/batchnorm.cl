// BatchNorm2d at inference (kuiper/layers/batchnorm2d.py): y = x * scale[c] + shift[c], with the statistics
// folded into scale and shift at build. Work-item (i, plane) of an (N * C, H * W) view: consecutive work-items
// take consecutive pixels of one channel, so the channel is found once per work-item without a division
// per pixel.

// Rounded as numpy rounds it: the product, then the sum (no fused multiply-add).
#pragma OPENCL FP_CONTRACT OFF

__kernel void batchnorm(__global float* restrict y, __global const float* restrict x,
                        __global const float* restrict scale, __global const float* restrict shift,
                        const int pixels, const int channels) {
    const int i = get_global_id(0), plane = get_global_id(1);
    if (i >= pixels) return;
    const int c = plane % channels;
    const long at = (long)plane * pixels + i;
    y[at] = x[at] * scale[c] + shift[c];
}
