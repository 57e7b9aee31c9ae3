// BatchNorm2d at inference (kuiper/opencl/batchnorm2d.py): y = x * scale[c] + shift[c], with the statistics
// folded into scale and shift at build. The input is seen as N * C planes of H * W pixels; plane p belongs
// to channel p % C. Three variants split that work differently (the layer's rule picks one per shape):
//
//   plane    batchnorm_pixel, one pixel per work-item: grid (H * W rounded up to 16, N * C). Neighbouring
//            work-items read neighbouring pixels, the pattern GPUs coalesce.
//   channel  batchnorm_run with run = H * W, one whole plane per work-item: grid (1, N * C).
//   tiled    batchnorm_run with run = a tile of pixels, each work-item a tile of a plane: grid (tiles, N * C).
//            A work-item's own loop over contiguous pixels is what a CPU core vectorizes.
//
// Dimension 1 of each grid is exactly the number of planes; dimension 0 is bounds-checked. Any local size
// works (the host passes none). A fused residual sum and activation (DenseNet's BatchNorm then ReLU) apply to
// each value as it is stored (cl/epilogue.h).

#include "epilogue.h"

// Rounded as numpy rounds it: the product, then the sum (no fused multiply-add).
#pragma OPENCL FP_CONTRACT OFF

__kernel void batchnorm_pixel(__global store_t* restrict y, __global const store_t* restrict x,
                              __global const store_t* restrict scale, __global const store_t* restrict shift,
                              const int pixels, const int channels, EPILOGUE_ARGS) {
    const int i = get_global_id(0), plane = get_global_id(1);
    if (i >= pixels) return;
    const int c = plane % channels;
    const long at = (long)plane * pixels + i;
    STORE(y, at, epilogue(LOAD(x, at) * LOAD(scale, c) + LOAD(shift, c), residual, at, act_a, act_b));
}

// Work-item (r, plane) takes pixels [r * run, (r + 1) * run) of its plane, the last run cut at the plane's end.
__kernel void batchnorm_run(__global store_t* restrict y, __global const store_t* restrict x,
                            __global const store_t* restrict scale, __global const store_t* restrict shift,
                            const int pixels, const int channels, const int run, EPILOGUE_ARGS) {
    const long first = (long)get_global_id(0) * run;
    const int plane = get_global_id(1);
    if (first >= pixels) return;
    const long end = (long)plane * pixels + (first + run < pixels ? first + run : pixels);
    const float s = LOAD(scale, plane % channels), b = LOAD(shift, plane % channels);
    for (long at = (long)plane * pixels + first; at < end; ++at) {
        STORE(y, at, epilogue(LOAD(x, at) * s + b, residual, at, act_a, act_b));
    }
}
