// Pooling (kuiper/layers/pooling.py, adaptive_pool.py): one work-item per output element of a flat
// (planes, out_h, out_w) array, so consecutive work-items write consecutive elements. Every size is a kernel
// argument: one program serves every shape and every window.

#include "store.h"

// Products and sums rounded one by one, as numpy computes them (no fused multiply-add).
#pragma OPENCL FP_CONTRACT OFF

// Output element i as (column, row, plane).
int3 output_position(int i, int out_h, int out_w) {
    return (int3)(i % out_w, i / out_w % out_h, i / out_w / out_h);
}

// PyTorch's max: a larger value or a NaN takes over, so a NaN stays once met (as numpy's maximum).
// (x != x rather than isnan(): PoCL calls isnan out of line, which made this kernel twice as slow)
bool takes_over(float candidate, float best) { return candidate > best || candidate != candidate; }

// ---- windows: output o along an axis starts at o * stride - padding, its taps lie dilation apart ----------
// Taps in the padding are skipped; an output none of whose taps reaches the input stays -inf.
__kernel void max_pool2d(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                         const int height, const int width, const int out_h, const int out_w,
                         const int kernel_h, const int kernel_w, const int stride_h, const int stride_w,
                         const int pad_h, const int pad_w, const int dilation_h, const int dilation_w) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int3 p = output_position(i, out_h, out_w);
    const __global store_t* plane = x + p.z * height * width;
    const int top = p.y * stride_h - pad_h, left = p.x * stride_w - pad_w;
    float best = -INFINITY;
    for (int kh = 0; kh < kernel_h; ++kh) {
        const int h = top + kh * dilation_h;
        if (h < 0 || h >= height) continue;
        for (int kw = 0; kw < kernel_w; ++kw) {
            const int w = left + kw * dilation_w;
            if (w >= 0 && w < width) {
                const float v = LOAD(plane, h * width + w);
                if (takes_over(v, best)) best = v;
            }
        }
    }
    STORE(y, i, best);
}

// The window's sum as numpy adds it, so the sums are bit-identical: each row's taps, then the rows; divided by
// divisor_override when it is not 0, else by the window's size: the positions inside the input, plus with
// count_include_pad those in the padding, never the part of a ceil_mode window past the right padding.
__kernel void avg_pool2d(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                         const int height, const int width, const int out_h, const int out_w,
                         const int kernel_h, const int kernel_w, const int stride_h, const int stride_w,
                         const int pad_h, const int pad_w, const int count_include_pad,
                         const int divisor_override) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int3 p = output_position(i, out_h, out_w);
    const __global store_t* plane = x + p.z * height * width;
    const int top = p.y * stride_h - pad_h, left = p.x * stride_w - pad_w;
    float sum = 0.0f;
    for (int h = max(top, 0); h < min(top + kernel_h, height); ++h) {
        float row = 0.0f;
        for (int w = max(left, 0); w < min(left + kernel_w, width); ++w) row += LOAD(plane, h * width + w);
        sum += row;
    }
    const int bottom = min(top + kernel_h, height + pad_h), right = min(left + kernel_w, width + pad_w);
    const int rows = count_include_pad ? bottom - top : min(bottom, height) - max(top, 0);
    const int cols = count_include_pad ? right - left : min(right, width) - max(left, 0);
    STORE(y, i, sum / (float)(divisor_override ? divisor_override : rows * cols));
}

// ---- adaptive bins: bin b of `bins` along an axis of `size` covers [floor(b*size/bins), ceil((b+1)*size/bins)) ----
int2 adaptive_bin(int b, int size, int bins) { return (int2)(b * size / bins, ((b + 1) * size + bins - 1) / bins); }

// The numpy path's mean: every bin row weighted by 1/rows, then the column sums weighted by 1/cols.
__kernel void adaptive_avg_pool2d(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                                  const int height, const int width, const int out_h, const int out_w) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int3 p = output_position(i, out_h, out_w);
    const __global store_t* plane = x + p.z * height * width;
    const int2 rows = adaptive_bin(p.y, height, out_h), cols = adaptive_bin(p.x, width, out_w);
    const float row_weight = 1.0f / (float)(rows.y - rows.x), col_weight = 1.0f / (float)(cols.y - cols.x);
    float sum = 0.0f;
    for (int w = cols.x; w < cols.y; ++w) {
        float column = 0.0f;
        for (int h = rows.x; h < rows.y; ++h) column += LOAD(plane, h * width + w) * row_weight;
        sum += column * col_weight;
    }
    STORE(y, i, sum);
}

// The maximum of output i's bin; *where is its flat h * width + w position in the plane. PyTorch scans the bin
// row by row, so the first maximum (or the last NaN) is the one it reports.
float adaptive_max(__global const store_t* x, int i, int height, int width, int out_h, int out_w, int* where) {
    const int3 p = output_position(i, out_h, out_w);
    const __global store_t* plane = x + p.z * height * width;
    const int2 rows = adaptive_bin(p.y, height, out_h), cols = adaptive_bin(p.x, width, out_w);
    *where = rows.x * width + cols.x;  // bins are never empty: start from their first position
    float best = LOAD(plane, *where);
    for (int h = rows.x; h < rows.y; ++h) {
        for (int w = cols.x; w < cols.y; ++w) {
            const float v = LOAD(plane, h * width + w);
            if (takes_over(v, best)) {
                *where = h * width + w;
                best = v;
            }
        }
    }
    return best;
}

__kernel void adaptive_max_pool2d(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                                  const int height, const int width, const int out_h, const int out_w) {
    const int i = get_global_id(0);
    int where;
    if (i < n) STORE(y, i, adaptive_max(x, i, height, width, out_h, out_w, &where));
}

// F.adaptive_max_pool2d's second output: the positions, as int64 like PyTorch's.
__kernel void adaptive_max_pool2d_indices(__global store_t* restrict y, __global long* restrict indices,
                                          __global const store_t* restrict x, const int n, const int height,
                                          const int width, const int out_h, const int out_w) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int where;
    STORE(y, i, adaptive_max(x, i, height, width, out_h, out_w, &where));
    indices[i] = where;
}
