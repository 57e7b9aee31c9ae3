// Resizing (kuiper/layers/upsample.py): one work-item per output element of a flat (planes, out_h, out_w)
// array, so consecutive work-items write consecutive elements. Each work-item computes its taps along H and W
// in float32 exactly as the numpy path's plans do; `scale_h`/`scale_w` are the host's source_scale.

#include "store.h"

// Products and sums rounded one by one, as numpy computes them (no fused multiply-add).
#pragma OPENCL FP_CONTRACT OFF

#define CUBIC_A -0.75f  // PyTorch's cubic convolution parameter

// Output element i as (column, row, plane).
int3 output_position(int i, int out_h, int out_w) {
    return (int3)(i % out_w, i / out_w % out_h, i / out_w / out_h);
}

// ---- nearest, nearest-exact: the one input position output o copies --------------------------------------
int nearest_source(int o, int in_size, int out_size, float scale, int exact) {
    if (exact) return min((int)floor(((float)o + 0.5f) * scale), in_size - 1);
    if (out_size == in_size) return o;  // PyTorch's exact shortcuts for scale 1 and 2
    if (out_size == 2 * in_size) return o / 2;
    return min((int)floor((float)o * scale), in_size - 1);
}

__kernel void resize_nearest(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                             const int in_h, const int in_w, const int out_h, const int out_w,
                             const float scale_h, const float scale_w, const int exact) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int3 p = output_position(i, out_h, out_w);
    const int h = nearest_source(p.y, in_h, out_h, scale_h, exact);
    const int w = nearest_source(p.x, in_w, out_w, scale_w, exact);
    STORE(y, i, LOAD(x, (p.z * in_h + h) * in_w + w));
}

// ---- interpolation: a few taps per axis (input position, weight) ------------------------------------------
// Where output o sits on the input axis: the corners line up, or the pixel centres (o + 0.5) do.
float source_position(int o, float scale, int align_corners) {
    return align_corners ? scale * (float)o : scale * ((float)o + 0.5f) - 0.5f;
}

// The input position left of `real` (at most the last), and how far past it `real` lies, within [0, 1].
int floor_and_fraction(float real, int in_size, float* fraction) {
    const float left = fmin(floor(real), (float)(in_size - 1));
    *fraction = clamp(real - left, 0.0f, 1.0f);
    return (int)left;
}

// out = sum over column taps c of col_weight[c] * (sum over row taps r of row_weight[r] * plane[row[r], col[c]]):
// rows first, in tap order, as the numpy path resamples H and then W.
float separable_sum(const __global store_t* plane, int in_w, int taps, const int* row, const float* row_weight,
                    const int* col, const float* col_weight) {
    float sum = 0.0f;
    for (int c = 0; c < taps; ++c) {
        float column = 0.0f;
        for (int r = 0; r < taps; ++r) column += LOAD(plane, row[r] * in_w + col[c]) * row_weight[r];
        sum += column * col_weight[c];
    }
    return sum;
}

// Two taps either side of the source position (positions left of pixel 0's centre read pixel 0); an unchanged
// size copies, as PyTorch does whatever the scale says.
void linear_taps(int o, int in_size, int out_size, float scale, int align_corners, int* index, float* weight) {
    float fraction = 0.0f;
    if (out_size == in_size) {
        index[0] = index[1] = o;
    } else {
        index[0] = floor_and_fraction(fmax(source_position(o, scale, align_corners), 0.0f), in_size, &fraction);
        index[1] = min(index[0] + 1, in_size - 1);
    }
    weight[0] = 1.0f - fraction;
    weight[1] = fraction;
}

__kernel void resize_bilinear(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                              const int in_h, const int in_w, const int out_h, const int out_w,
                              const float scale_h, const float scale_w, const int align_corners) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int3 p = output_position(i, out_h, out_w);
    int row[2], col[2];
    float row_weight[2], col_weight[2];
    linear_taps(p.y, in_h, out_h, scale_h, align_corners, row, row_weight);
    linear_taps(p.x, in_w, out_w, scale_w, align_corners, col, col_weight);
    STORE(y, i, separable_sum(x + p.z * in_h * in_w, in_w, 2, row, row_weight, col, col_weight));
}

// The cubic convolution kernel at distance d: d < 1 (the inner taps) and 1 <= d < 2 (the outer ones).
float cubic_inner(float d) { return ((CUBIC_A + 2.0f) * d - (CUBIC_A + 3.0f)) * d * d + 1.0f; }
float cubic_outer(float d) { return ((CUBIC_A * d - 5.0f * CUBIC_A) * d + 8.0f * CUBIC_A) * d - 4.0f * CUBIC_A; }

// Four taps, positions left-1 .. left+2 clamped to the edge (the source position is not clamped here).
void cubic_taps(int o, int in_size, float scale, int align_corners, int* index, float* weight) {
    float t;
    const int left = floor_and_fraction(source_position(o, scale, align_corners), in_size, &t);
    for (int k = 0; k < 4; ++k) index[k] = clamp(left - 1 + k, 0, in_size - 1);
    weight[0] = cubic_outer(t + 1.0f);
    weight[1] = cubic_inner(t);
    weight[2] = cubic_inner(1.0f - t);
    weight[3] = cubic_outer(2.0f - t);
}

__kernel void resize_bicubic(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                             const int in_h, const int in_w, const int out_h, const int out_w,
                             const float scale_h, const float scale_w, const int align_corners) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int3 p = output_position(i, out_h, out_w);
    int row[4], col[4];
    float row_weight[4], col_weight[4];
    cubic_taps(p.y, in_h, scale_h, align_corners, row, row_weight);
    cubic_taps(p.x, in_w, scale_w, align_corners, col, col_weight);
    STORE(y, i, separable_sum(x + p.z * in_h * in_w, in_w, 4, row, row_weight, col, col_weight));
}
