// Pooling (kuiper/layers/pooling.py, adaptive_pool.py). Windows: a run of outputs of one row per work-item
// (below); adaptive bins: one work-item per output element of a flat (planes, out_h, out_w) array, so
// consecutive work-items write consecutive elements. Every size is a kernel argument: one program serves
// every shape and every window.

#include "lanes.h"
#include "store.h"

// Products and sums rounded one by one, as numpy computes them (no fused multiply-add).
#pragma OPENCL FP_CONTRACT OFF

// Output element i as (column, row, plane).
int3 output_position(int i, int out_h, int out_w) {
    return (int3)(i % out_w, i / out_w % out_h, i / out_w / out_h);
}

// PyTorch's max: a larger value or a NaN takes over, so a NaN stays once met (as numpy's maximum).
// (x != x rather than isnan(): PoCL calls isnan out of line, which makes this kernel much slower)
bool takes_over(float candidate, float best) { return candidate > best || candidate != candidate; }

// ---- windows: output o along an axis starts at o * stride - padding, its taps lie dilation apart ----------
// Work-item (s, z) pools `span` consecutive outputs of one output row of plane z: segment s % segments of row
// s / segments. CPUs take whole rows (span = out_w): no division per output, which PoCL runs many times slower
// than the rest. GPUs take one output each
// (span = 1), so that neighbouring work-items write neighbouring addresses. Global size (out_h * segments,
// planes). Returns false for a work-item past the last row.
inline bool row_span(int s, int out_h, int out_w, int span, int* oy, int* begin, int* end) {
    const int segments = (out_w + span - 1) / span;
    *oy = s / segments;
    *begin = s % segments * span;
    *end = *begin + span < out_w ? *begin + span : out_w;
    return s < out_h * segments;
}

// A window kernel's start: its run [begin, end) of output row oy (returning past the last row), the input
// plane z it reads, its output row `out`, and `top`, the input row of the windows' first tap
#define WINDOW_ROW                                                                             \
    int oy, begin, end;                                                                        \
    if (!row_span(get_global_id(0), out_h, out_w, span, &oy, &begin, &end)) return;            \
    const long z = get_global_id(1);                                                           \
    const __global store_t* plane = x + z * height * width;                                    \
    __global store_t* out = y + (z * out_h + oy) * out_w;                                      \
    const int top = oy * stride_h - pad_h;

#define WINDOW_ARGS                                                                                        \
    __global store_t* restrict y, __global const store_t* restrict x, const int span, const int height,   \
    const int width, const int out_h, const int out_w, const int kernel_h, const int kernel_w,             \
    const int stride_h, const int stride_w, const int pad_h, const int pad_w

// The maximum of the window at (top, left); `inside` promises that its columns all lie in the input (a
// constant at each call: the compiler drops the column tests there). Taps in the padding are skipped; an
// output none of whose taps reaches the input stays -inf.
inline float window_max(const __global store_t* plane, int top, int left, int height, int width, int kernel_h,
                        int kernel_w, int dilation_h, int dilation_w, bool inside) {
    float best = -INFINITY;
    for (int kh = 0; kh < kernel_h; ++kh) {
        const int h = top + kh * dilation_h;
        if (h < 0 || h >= height) continue;
        for (int kw = 0; kw < kernel_w; ++kw) {
            const int w = left + kw * dilation_w;
            if (inside || (w >= 0 && w < width)) {
                const float v = LOAD(plane, h * width + w);
                if (takes_over(v, best)) best = v;
            }
        }
    }
    return best;
}

__kernel void max_pool2d(WINDOW_ARGS, const int dilation_h, const int dilation_w) {
    WINDOW_ROW
    // the outputs in [lo, hi) have every column of their window inside the input
    const int reach = width + pad_w - (kernel_w - 1) * dilation_w;
    int lo = (pad_w + stride_w - 1) / stride_w, hi = reach > 0 ? (reach - 1) / stride_w + 1 : 0;
    lo = lo < begin ? begin : lo > end ? end : lo;
    hi = hi < lo ? lo : hi > end ? end : hi;
#define MAX_AT(ox, inside) STORE(out, ox, window_max(plane, top, (ox) * stride_w - pad_w, height, width, kernel_h, \
                                                     kernel_w, dilation_h, dilation_w, inside))
    for (int ox = begin; ox < lo; ++ox) MAX_AT(ox, false);
    for (int ox = lo; ox < hi; ++ox) MAX_AT(ox, true);
    for (int ox = hi; ox < end; ++ox) MAX_AT(ox, false);
#undef MAX_AT
}

// Pooling on CPUs, for one window built in (-DKH, -DKW, -DSH, -DSW, -DDH, -DDW): work-item (oy, z) computes
// output row oy of plane z, eight outputs at a time in the lanes of a float8. A row of taps reads the SPAN
// input columns the eight windows cover into registers (straight loads where they all lie inside the row),
// and each tap column is one vector operation on lanes SW apart. The window kernels merged across rows gather
// each tap, and are slower on every CPU driver (docs/tuning.md). Global size (out_h, planes).
// Maximum by default; with -DAVG the average, its divisor -DDIVISOR (0: none) or else the window's positions
// as avg_pool2d counts them (-DCOUNT_PAD: those in the padding too). Its sums are numpy's: each row's taps in
// order from 0, then the rows, a tap in the padding adding 0 (numpy skips it: the same sum).
#ifdef KW
#define LANES 8
#define SPAN ((LANES - 1) * SW + (KW - 1) * DW + 1)
#ifdef AVG
#define START 0.0f
#define COMBINE(a, v) ((a) + (v))
#else
#define START (-INFINITY)
#define COMBINE(a, v) select((a), (v), ((v) > (a)) | ((v) != (v)))  // takes_over, lane by lane
#endif

// lanes l = 0 .. 7 of a tap column: input columns c + l * SW of a row, as depthwise_rows' row_lanes (cl/conv.cl)
#if SW == 1
#define tap_lanes(r, c) LOAD8(r, c)
#elif SW == 2
#define tap_lanes(r, c) ((float16)(LOAD8(r, c), LOAD8(r, (c) + 8))).even
#endif

#ifdef AVG
// the divisors of outputs ox .. ox + 7 of row oy
inline float8 divisors(int oy, int ox, int height, int width, int pad_h, int pad_w) {
#if DIVISOR
    return (float8)DIVISOR;
#else
    const int top = oy * SH - pad_h;
    const int bottom = min(top + KH, height + pad_h);
    const int rows = COUNT_PAD ? bottom - top : min(bottom, height) - max(top, 0);
    const int8 left = (int8)(ox * SW - pad_w) + (int8)(0, 1, 2, 3, 4, 5, 6, 7) * SW;
    const int8 ends = left + KW;
    const int8 right = ends < width + pad_w ? ends : (int8)(width + pad_w);
    const int8 cols = COUNT_PAD ? right - left : (right < width ? right : (int8)width) - (left > 0 ? left : (int8)0);
    return convert_float8(rows * cols);
#endif
}
#endif

__kernel OWN_LANES void pool2d_rows(__global store_t* restrict y, __global const store_t* restrict x,
                                    const int height, const int width, const int out_h, const int out_w,
                                    const int pad_h, const int pad_w) {
    const int oy = get_global_id(0);
    const long z = get_global_id(1);
    const __global store_t* plane = x + z * height * width;
    __global store_t* out = y + (z * out_h + oy) * out_w;
    for (int ox = 0; ox < out_w; ox += LANES) {
        const int left = ox * SW - pad_w;
        const bool inside = left >= 0 && left + SPAN <= width;
        float8 total = START;
        #pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
            const int h = oy * SH - pad_h + kh * DH;
            if (h < 0 || h >= height) continue;
            const __global store_t* row = plane + h * width;
            float8 taps = START;
#if SW <= 2
            if (inside) {  // every tap column a vector load (two and a shuffle at SW = 2), not eight lanes set
                #pragma unroll
                for (int kw = 0; kw < KW; ++kw) taps = COMBINE(taps, tap_lanes(row, left + kw * DW));
                total = COMBINE(total, taps);
                continue;
            }
#endif
            float r[SPAN];  // the row's columns left .. left + SPAN - 1, START outside it (a tap in the padding)
            if (inside) {
                #pragma unroll
                for (int j = 0; j < SPAN; ++j) r[j] = LOAD(row, left + j);
            } else {
                #pragma unroll
                for (int j = 0; j < SPAN; ++j) r[j] = left + j >= 0 && left + j < width ? LOAD(row, left + j) : START;
            }
            #pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
                const float8 v = (float8)(r[kw * DW], r[kw * DW + SW], r[kw * DW + 2 * SW], r[kw * DW + 3 * SW],
                                          r[kw * DW + 4 * SW], r[kw * DW + 5 * SW], r[kw * DW + 6 * SW],
                                          r[kw * DW + 7 * SW]);
                taps = COMBINE(taps, v);
            }
            total = COMBINE(total, taps);
        }
#ifdef AVG
        total = total / divisors(oy, ox, height, width, pad_h, pad_w);
#endif
        union { float8 v; float s[LANES]; } lanes = {total};
        if (ox + LANES <= out_w) {
            #pragma unroll
            for (int l = 0; l < LANES; ++l) STORE(out, ox + l, lanes.s[l]);
        } else {
            for (int l = 0; ox + l < out_w; ++l) STORE(out, ox + l, lanes.s[l]);
        }
    }
}

#ifndef AVG
// Max pooling on GPUs, for one window built in (as pool2d_rows): work-item i computes element i of the flat
// (planes, out_h, out_w) output, so that neighbouring work-items write neighbouring addresses, its taps
// unrolled where max_pool2d loops over a window it reads as arguments (docs/tuning.md). Global size: the
// output's size, rounded up to the work-group's.
__kernel void max_pool2d_window(__global store_t* restrict y, __global const store_t* restrict x, const int total,
                                const int height, const int width, const int out_h, const int out_w,
                                const int pad_h, const int pad_w) {
    const int i = get_global_id(0);
    if (i >= total) return;
    const int3 at = output_position(i, out_h, out_w);
    const __global store_t* plane = x + (long)at.z * height * width;
    const int top = at.y * SH - pad_h, left = at.x * SW - pad_w;
    float best = -INFINITY;
    #pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
        const int h = top + kh * DH;
        #pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
            const int w = left + kw * DW;
            if (h >= 0 && h < height && w >= 0 && w < width) {
                const float v = LOAD(plane, h * width + w);
                if (takes_over(v, best)) best = v;
            }
        }
    }
    STORE(y, i, best);
}
#endif
#endif

// The window's sum as numpy adds it, so the sums are bit-identical: each row's taps, then the rows; divided by
// divisor_override when it is not 0, else by the window's size: the positions inside the input, plus with
// count_include_pad those in the padding, never the part of a ceil_mode window past the right padding.
__kernel void avg_pool2d(WINDOW_ARGS, const int count_include_pad, const int divisor_override) {
    WINDOW_ROW
    const int bottom = min(top + kernel_h, height + pad_h);
    const int rows = count_include_pad ? bottom - top : min(bottom, height) - max(top, 0);
    for (int ox = begin; ox < end; ++ox) {
        const int left = ox * stride_w - pad_w;
        float sum = 0.0f;
        for (int h = max(top, 0); h < min(top + kernel_h, height); ++h) {
            float row = 0.0f;
            for (int w = max(left, 0); w < min(left + kernel_w, width); ++w) row += LOAD(plane, h * width + w);
            sum += row;
        }
        const int right = min(left + kernel_w, width + pad_w);
        const int cols = count_include_pad ? right - left : min(right, width) - max(left, 0);
        STORE(out, ox, sum / (float)(divisor_override ? divisor_override : rows * cols));
    }
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

// global_avg_pool_rows: the mean of each whole plane (a 1 x 1 output), for CPUs: work-item p sums plane p in
// the order it is stored, eight running sums in a float8, where the kernel above walks it column by column, a
// load a row apart each. Global size (planes).
__kernel OWN_LANES void global_avg_pool_rows(__global store_t* restrict y, __global const store_t* restrict x,
                                             const int n, const int height, const int width) {
    const int p = get_global_id(0);
    if (p >= n) return;
    const int size = height * width;
    const __global store_t* plane = x + (long)p * size;
    float8 sums = 0.0f;
    int i = 0;
    for (; i + 8 <= size; i += 8) sums += LOAD8(plane, i);
    float sum = (sums.s0 + sums.s1) + (sums.s2 + sums.s3) + ((sums.s4 + sums.s5) + (sums.s6 + sums.s7));
    for (; i < size; ++i) sum += LOAD(plane, i);
    STORE(y, p, sum / (float)size);
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
