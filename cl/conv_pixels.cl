// conv_pixels: a convolution on CPUs as the product (output pixels x K) @ (K x Cout), K = Cin kh kw
// (kuiper/opencl/conv_pixels.py launches it).
//
// gemm_cpu's taps variants (cl/gemm.cl) run the product the other way round, output channels x pixels in blocks
// of 32 pixels along the padded grid of a phase plane, whose padding columns they compute too: a 7x7 output
// (a grid of 61 columns) takes 64 columns for its 49 pixels, a 14x14 one 224 for 196. Here a block is MB output
// pixels, anywhere in the image, by NV vectors of 16 output channels: nothing is computed in vain.
//
// A is the input as cl/conv.cl's pad_planes lays it out (padding written out, rows and columns split into the
// stride's phases): pixel (oy, ox) of tap k is element taps[k] + oy * phase_w + ox of the item's copy, as for
// the taps variants. B is the weights in panels of NB = NV * 16 output channels, (Cout / NB, K, NB) with the
// last panel's missing channels zero. Each step of k loads NV vectors of weights and MB scalars of the image
// for MB x NV vector multiply-adds.
//
// Work-item (r, nb, item) computes a run of `run` blocks (at most RUN), pixels from r * run * MB, for channels
// from nb * NB of one product: a batch item, or a tile position of Winograd's products (kuiper/opencl/winograd.py),
// whose image starts padded_item and whose panels panels_item elements after the last's (0: one set for a
// convolution's items). It goes through K in chunks of KC, each chunk for every block of the run,
// keeping the blocks' sums in `sums` between chunks: a chunk of the panel comes from memory once and stays in
// the cache for the run, where block by block the whole panel would stream from memory for each. Then channel
// by channel, 16 pixels at a time, the bias and the fused epilogue (cl/epilogue.h) on a vector, stored to the
// channel's consecutive pixels. Pixel rows past the image recompute its last pixel and are not stored.
#include "epilogue.h"
#include "lanes.h"

#define NB (NV * 16)
#ifdef KUIPER_HALF
#define LOAD16(p) vload_half16(0, p)
#else  // scalar loads merged into one vector load: vload16 stays a call on PoCL (cl/gemm.cl)
#define LOAD16(p) (float16)(LOAD(p, 0), LOAD(p, 1), LOAD(p, 2), LOAD(p, 3), LOAD(p, 4), LOAD(p, 5), LOAD(p, 6), \
                            LOAD(p, 7), LOAD(p, 8), LOAD(p, 9), LOAD(p, 10), LOAD(p, 11), LOAD(p, 12),          \
                            LOAD(p, 13), LOAD(p, 14), LOAD(p, 15))
#endif

__kernel OWN_LANES void conv_pixels(__global store_t* restrict y, __global const store_t* restrict padded,
                                    __global const int* restrict taps, __global const store_t* restrict panels,
                                    __global const store_t* restrict bias, const int has_bias, EPILOGUE_ARGS,
                                    const int channels, const int K, const int pixels, const int out_w,
                                    const int phase_w, const long padded_item, const long panels_item,
                                    const int run) {
    const int first = get_global_id(0) * run, n0 = get_global_id(1) * NB;
    const long item = get_global_id(2);
    const int blocks = (pixels + MB - 1) / MB - first < run ? (pixels + MB - 1) / MB - first : run;
    if (blocks <= 0 || n0 >= channels) return;
    const __global store_t* image = padded + item * padded_item;
    int at[RUN][MB];  // each pixel row's offset in a phase plane
    for (int b = 0; b < blocks; ++b) {
        #pragma unroll
        for (int r = 0; r < MB; ++r) {
            const int p = (first + b) * MB + r < pixels ? (first + b) * MB + r : pixels - 1, oy = p / out_w;
            at[b][r] = oy * phase_w + p - oy * out_w;
        }
    }
    float16 sums[RUN][MB][NV];
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int k1 = k0 + KC < K ? k0 + KC : K;
        for (int b = 0; b < blocks; ++b) {
            float16 acc[MB][NV];
            int row[MB];
            #pragma unroll
            for (int r = 0; r < MB; ++r) {
                row[r] = at[b][r];
                #pragma unroll
                for (int v = 0; v < NV; ++v) acc[r][v] = k0 ? sums[b][r][v] : 0.0f;
            }
            const __global store_t* w = panels + item * panels_item + ((long)n0 * K + k0 * NB);
            for (int k = k0; k < k1; ++k, w += NB) {
                float16 wv[NV];
                #pragma unroll
                for (int v = 0; v < NV; ++v) wv[v] = LOAD16(w + v * 16);
                const __global store_t* tap = image + taps[k];
                #pragma unroll
                for (int r = 0; r < MB; ++r) {
                    const float a = LOAD(tap, row[r]);
                    #pragma unroll
                    for (int v = 0; v < NV; ++v) acc[r][v] += a * wv[v];
                }
            }
            #pragma unroll
            for (int r = 0; r < MB; ++r) {
                #pragma unroll
                for (int v = 0; v < NV; ++v) sums[b][r][v] = acc[r][v];
            }
        }
    }
    // the run's outputs channel by channel: a channel's pixels are consecutive in y, so 16 of them at a time go
    // through the epilogue and out as one vector (their sums, NB floats apart in `sums`, gathered; the host keeps
    // RUN * MB a multiple of 16, so that the last vector's lanes past the run still read inside `sums`)
    const float* flat = (const float*)sums;
    const int p0 = first * MB, count = pixels - p0 < blocks * MB ? pixels - p0 : blocks * MB;
    for (int c = 0; c < NB && n0 + c < channels; ++c) {
        const float b = has_bias ? LOAD(bias, n0 + c) : 0.0f;
        const long out = (item * channels + n0 + c) * pixels + p0;
        for (int p = 0; p < count; p += 16) {
            union { float16 v; float s[16]; } lanes;
            #pragma unroll
            for (int l = 0; l < 16; ++l) lanes.s[l] = flat[(p + l) * NB + c] + b;
            if (count - p >= 16) {
                lanes.v = epilogue16(lanes.v, residual, out + p, act_a, act_b);
                #pragma unroll
                for (int l = 0; l < 16; ++l) STORE(y, out + p + l, lanes.s[l]);
            } else {
                lanes.v = epilogue16_part(lanes.v, residual, out + p, count - p, act_a, act_b);
                for (int l = 0; l < count - p; ++l) STORE(y, out + p + l, lanes.s[l]);
            }
        }
    }
}
