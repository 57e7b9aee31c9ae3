// Resizing (kuiper/layers/upsample.py) of a flat (planes, out_h, out_w) array. Every mode is separable: an
// output pixel sums TAPS input rows times TAPS input columns, each axis's taps (input position, weight) computed
// from the output position in float32 exactly as the numpy path's plans are; `scale_h`/`scale_w` are the host's
// source_scale. Built with -DTAPS=1 (nearest, nearest-exact), 2 (bilinear) or 4 (bicubic); the last argument,
// `flag`, is nearest's `exact` or the interpolating modes' align_corners.
//
// GPUs: work-item i computes output element i, so consecutive work-items write consecutive elements.
// CPUs (-DGRID): work-item (ox, oy, z) computes output pixel (oy, ox) of plane z. The range gives the position,
// so no division finds it (many times dearer than the rest on PoCL), and PoCL runs neighbouring work-items as
// the lanes of one vector. That takes straight-line code: the tap loops are unrolled, dimension 0 is exactly
// the output width (the host launches the ragged end apart, at an offset), since a bounds check or a clamped
// column makes PoCL store lane by lane.
//
// The built-ins of the tap arithmetic (floor, fmin, clamp) are written as comparisons: each is a call on PoCL.

#include "store.h"

// Products and sums rounded one by one, as numpy computes them (no fused multiply-add).
#pragma OPENCL FP_CONTRACT OFF

#define CUBIC_A -0.75f  // PyTorch's cubic convolution parameter

inline int floor_int(float v) {
    const int t = (int)v;  // rounds toward zero
    // not (float)t > v alone: with that, PoCL ran the bilinear grid several times slower (a floorf call per
    // element, it seems)
    return v < 0.0f && (float)t != v ? t - 1 : t;
}

#if TAPS == 1
// ---- nearest, nearest-exact: the one input position output o copies --------------------------------------
void axis_taps(int o, int in_size, int out_size, float scale, int exact, int* index, float* weight) {
    int source;
    if (exact) source = floor_int(((float)o + 0.5f) * scale);
    else if (out_size == in_size) source = o;  // PyTorch's exact shortcuts for scale 1 and 2
    else if (out_size == 2 * in_size) source = o / 2;
    else source = floor_int((float)o * scale);
    index[0] = source < in_size - 1 ? source : in_size - 1;
}
#else
// ---- interpolation: a few taps per axis (input position, weight) ------------------------------------------
// Where output o sits on the input axis: the corners line up, or the pixel centres (o + 0.5) do.
inline float source_position(int o, float scale, int align_corners) {
    return align_corners ? scale * (float)o : scale * ((float)o + 0.5f) - 0.5f;
}

// The input position left of `real` (at most the last), and how far past it `real` lies, within [0, 1].
inline int floor_and_fraction(float real, int in_size, float* fraction) {
    const int below = floor_int(real), left = below < in_size - 1 ? below : in_size - 1;
    const float f = real - (float)left;
    *fraction = f < 0.0f ? 0.0f : f > 1.0f ? 1.0f : f;
    return left;
}

#if TAPS == 2
// Two taps either side of the source position (positions left of pixel 0's centre read pixel 0); an unchanged
// size copies, as PyTorch does whatever the scale says.
void axis_taps(int o, int in_size, int out_size, float scale, int align_corners, int* index, float* weight) {
    float fraction = 0.0f;
    if (out_size == in_size) {
        index[0] = index[1] = o;
    } else {
        const float real = source_position(o, scale, align_corners);
        index[0] = floor_and_fraction(real > 0.0f ? real : 0.0f, in_size, &fraction);
        index[1] = index[0] + 1 < in_size ? index[0] + 1 : in_size - 1;
    }
    weight[0] = 1.0f - fraction;
    weight[1] = fraction;
}
#else
// The cubic convolution kernel at distance d: d < 1 (the inner taps) and 1 <= d < 2 (the outer ones).
inline float cubic_inner(float d) { return ((CUBIC_A + 2.0f) * d - (CUBIC_A + 3.0f)) * d * d + 1.0f; }
inline float cubic_outer(float d) { return ((CUBIC_A * d - 5.0f * CUBIC_A) * d + 8.0f * CUBIC_A) * d - 4.0f * CUBIC_A; }

// Four taps, positions left-1 .. left+2 clamped to the edge (the source position is not clamped here).
void axis_taps(int o, int in_size, int out_size, float scale, int align_corners, int* index, float* weight) {
    float t;
    const int left = floor_and_fraction(source_position(o, scale, align_corners), in_size, &t);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int at = left - 1 + k;
        index[k] = at < 0 ? 0 : at > in_size - 1 ? in_size - 1 : at;
    }
    weight[0] = cubic_outer(t + 1.0f);
    weight[1] = cubic_inner(t);
    weight[2] = cubic_inner(1.0f - t);
    weight[3] = cubic_outer(2.0f - t);
}
#endif
#endif

// An output pixel of `plane` from its row taps and its column taps: rows first, in tap order, as the numpy path
// resamples H and then W; nearest copies the one pixel.
inline float sample(const __global store_t* plane, int in_w, const int* row, const float* row_weight,
                    const int* col, const float* col_weight) {
#if TAPS == 1
    return LOAD(plane, row[0] * in_w + col[0]);
#else
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < TAPS; ++c) {
        float column = 0.0f;
#pragma unroll
        for (int r = 0; r < TAPS; ++r) column += LOAD(plane, row[r] * in_w + col[c]) * row_weight[r];
        sum += column * col_weight[c];
    }
    return sum;
#endif
}

__kernel void resize(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                     const int in_h, const int in_w, const int out_h, const int out_w,
                     const float scale_h, const float scale_w, const int flag) {
#ifdef GRID
    const int ox = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    const long i = ((long)z * out_h + oy) * out_w + ox;
#else
    const int i = get_global_id(0);
    if (i >= n) return;
    const int ox = i % out_w, oy = i / out_w % out_h, z = i / out_w / out_h;
#endif
    int row[TAPS], col[TAPS];
    float row_weight[TAPS], col_weight[TAPS];
    axis_taps(oy, in_h, out_h, scale_h, flag, row, row_weight);
    axis_taps(ox, in_w, out_w, scale_w, flag, col, col_weight);
    STORE(y, i, sample(x + (long)z * in_h * in_w, in_w, row, row_weight, col, col_weight));
}
