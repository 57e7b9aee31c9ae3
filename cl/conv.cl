// Convolution around the GEMM (kuiper/opencl/conv2d.py, conv_transpose2d.py): im2col builds Conv2d's column
// matrix, col2im folds ConvTranspose2d's columns back into an image, and depthwise convolution, too thin for
// a GEMM, is computed directly. Consecutive work-items take consecutive pixels (or runs of them), the unit
// stride for writes and for reads along an image row. Every size is an argument.
//
// Geometry along an axis: output o's tap t reads input o * stride - pad + t * dilation.
#include "epilogue.h"
#include "store.h"  // LOAD8
#include "lanes.h"

// ---- im2col: column matrix (items, groups, cin_g * kh * kw, out_h * out_w) of a batch of images ----------
// Row (c, i, j) of group g holds, for every output pixel, the input channel g * cin_g + c under tap (i, j),
// or 0 where the tap falls in the padding. Work-item (s, row, z) fills `span` consecutive pixels of one
// output row: span segment s % segments of output row s / segments. CPUs take whole rows (span = out_w) where
// rows are long (else im2col_pixels below): the padding test splits the row into three plain loops, with no
// division per pixel (a per-pixel division is many times dearer than the rest on PoCL). GPUs take one pixel
// each (span = 1), so that neighbouring work-items write neighbouring addresses. Global size (out_h * segments,
// rows, items * groups); the chunk's first image starts x_offset elements into x.
__kernel OWN_LANES void im2col(__global store_t* restrict col, __global const store_t* restrict x, const long x_offset,
                     const int span, const int groups, const int cin_g, const int height, const int width,
                     const int out_h, const int out_w, const int kernel_h, const int kernel_w,
                     const int stride_h, const int stride_w, const int pad_h, const int pad_w,
                     const int dilation_h, const int dilation_w) {
    const int s = get_global_id(0), row = get_global_id(1), z = get_global_id(2);
    const int segments = (out_w + span - 1) / span, taps = kernel_h * kernel_w;
    if (s >= out_h * segments || row >= cin_g * taps) return;
    const int c = row / taps, i = row % taps / kernel_w, j = row % kernel_w;
    const int oy = s / segments, begin = s % segments * span, end = begin + span < out_w ? begin + span : out_w;
    const int y = oy * stride_h - pad_h + i * dilation_h, left = j * dilation_w - pad_w;
    const bool row_inside = y >= 0 && y < height;
    // z = item * groups + g, and channel g * cin_g + c of that item is plane z * cin_g + c
    const __global store_t* in = x + x_offset + (((long)z * cin_g + c) * height + (row_inside ? y : 0)) * width;
    __global store_t* out = col + ((long)z * cin_g * taps + row) * out_h * out_w + oy * out_w;
    // the pixels ox in [lo, hi) read the input at ox * stride_w + left; the others read padding
    // (ternaries, not clamp(): a built-in is a call on PoCL)
    int lo = left >= 0 ? 0 : (stride_w - 1 - left) / stride_w;
    int hi = row_inside && left < width ? (width - 1 - left) / stride_w + 1 : 0;
    lo = lo < begin ? begin : lo > end ? end : lo;
    hi = hi < lo ? lo : hi > end ? end : hi;
    for (int ox = begin; ox < lo; ++ox) STORE(out, ox, 0.0f);
    for (int ox = lo; ox < hi; ++ox) STORE(out, ox, LOAD(in, ox * stride_w + left));
    for (int ox = hi; ox < end; ++ox) STORE(out, ox, 0.0f);
}

// im2col_pixels: the same column matrix for CPUs where output rows are short. Work-item (p, row, z) writes
// pixel p of one row of the matrix, straight-line code with no loop and no bounds check (the host launches
// exactly out_h * out_w pixels in dimension 0, the ragged end apart), so PoCL computes neighbouring pixels as
// the lanes of a vector. The pixel's output row is (p + 0.5) * (1 / out_w) rounded down, exact below 2^22
// pixels (the float error is under 0.5 / out_w there), not by an integer division per pixel (see above).
// Faster than whole rows on short rows only (docs/tuning.md).
__kernel OWN_LANES void im2col_pixels(__global store_t* restrict col, __global const store_t* restrict x,
                            const long x_offset, const float inv_out_w, const int cin_g, const int height,
                            const int width, const int out_h, const int out_w, const int kernel_h,
                            const int kernel_w, const int stride_h, const int stride_w, const int pad_h,
                            const int pad_w, const int dilation_h, const int dilation_w) {
    const int p = get_global_id(0), row = get_global_id(1), z = get_global_id(2);
    const int taps = kernel_h * kernel_w, c = row / taps, i = row % taps / kernel_w, j = row % kernel_w;
    const int oy = (int)(((float)p + 0.5f) * inv_out_w), ox = p - oy * out_w;
    const int y = oy * stride_h - pad_h + i * dilation_h, xx = ox * stride_w - pad_w + j * dilation_w;
    const __global store_t* in = x + x_offset + ((long)z * cin_g + c) * height * width;
    // a load only where the tap is inside: PoCL makes it a masked gather (a clamped index was slower)
    const float v = y >= 0 && y < height && xx >= 0 && xx < width ? LOAD(in, y * width + xx) : 0.0f;
    STORE(col + ((long)z * cin_g * taps + row) * out_h * out_w, p, v);
}

// ---- col2im: ConvTranspose2d's output from its columns (items, groups, cout_g * kh * kw, height * width) ------
// Output pixel (oy, ox) of channel o sums, in tap order, the taps (i, j) of the input pixels that scatter onto
// it: input row iy with iy * stride - pad + i * dilation == oy, which exists when the distance is a whole
// number of strides inside the input. A gather, so no two work-items write the same place. Global size
// (out_h * out_w, channels, items); the chunk's first image starts y_offset elements into y.
__kernel void col2im(__global store_t* restrict y, const long y_offset, __global const store_t* restrict col,
                     __global const store_t* restrict bias, const int has_bias, const int channels,
                     const int cout_g, const int height, const int width, const int out_h, const int out_w,
                     const int kernel_h, const int kernel_w, const int stride_h, const int stride_w,
                     const int pad_h, const int pad_w, const int dilation_h, const int dilation_w) {
    const int p = get_global_id(0), o = get_global_id(1), item = get_global_id(2);
    if (p >= out_h * out_w || o >= channels) return;
    const int oy = p / out_w + pad_h, ox = p % out_w + pad_w;
    // channel o is row block o % cout_g of group o / cout_g: (item * groups + g) * cout_g + o % cout_g
    const long block = (long)item * channels + o;
    const __global store_t* taps = col + block * kernel_h * kernel_w * height * width;
    float sum = 0.0f;
    for (int i = 0; i < kernel_h; ++i) {
        const int dy = oy - i * dilation_h;
        if (dy < 0 || dy % stride_h || dy / stride_h >= height) continue;
        for (int j = 0; j < kernel_w; ++j) {
            const int dx = ox - j * dilation_w;
            if (dx < 0 || dx % stride_w || dx / stride_w >= width) continue;
            sum += LOAD(taps, ((long)i * kernel_w + j) * height * width + dy / stride_h * width + dx / stride_w);
        }
    }
    STORE(y, y_offset + block * out_h * out_w + p, has_bias ? sum + LOAD(bias, o) : sum);
}

// ---- depthwise: one input channel per group, `multiplier` output channels per input channel -------------
// Output channel o reads input channel o / multiplier with its own KH x KW weights (compile-time constants, so
// the taps unroll), adds the bias and runs the fused epilogue (cl/epilogue.h). Plane z = item * channels + o of
// the output reads plane z / multiplier of the input. Three kernels:
//   depthwise_conv2d   GPUs: work-item (ox, oy, z) computes one pixel: neighbouring work-items read and write
//                      neighbouring addresses. Global size (out_w rounded up, out_h, items * channels).
//   depthwise_padded   CPUs: work-item (oy, z) computes output row oy of plane z, DW pixels at a time in a
//                      floatDW, one vector load and multiply-add per tap, from a copy of the input with its
//                      padding written out and its columns split by the stride SW (pad_planes), so that no
//                      load needs a bounds test and a tap's lanes are consecutive at any stride. PoCL runs the
//                      per-pixel kernel one pixel at a time. Global size (out_h, items * channels).
//   depthwise_rows     CPUs, rows wide enough: the same from the input itself, the bounds tested at a row's
//                      ends only, with no copy to write first.
#ifdef KH
__kernel void depthwise_conv2d(__global store_t* restrict y, __global const store_t* restrict x,
                               __global const store_t* restrict weight, __global const store_t* restrict bias,
                               const int has_bias, EPILOGUE_ARGS, const int channels, const int multiplier,
                               const int height, const int width, const int out_h, const int out_w,
                               const int stride_h, const int stride_w, const int pad_h, const int pad_w,
                               const int dilation_h, const int dilation_w) {
    const int ox = get_global_id(0), oy = get_global_id(1);
    const long plane = get_global_id(2);
    if (ox >= out_w) return;
    const int o = plane % channels;
    const __global store_t* in = x + plane / multiplier * height * width;
    const __global store_t* w = weight + o * KH * KW;
    const int top = oy * stride_h - pad_h, left = ox * stride_w - pad_w;
    float sum = has_bias ? LOAD(bias, o) : 0.0f;
    #pragma unroll
    for (int i = 0; i < KH; ++i) {
        const int row = top + i * dilation_h;
        if (row < 0 || row >= height) continue;
        #pragma unroll
        for (int j = 0; j < KW; ++j) {
            const int col = left + j * dilation_w;
            if (col >= 0 && col < width) sum += LOAD(in, row * width + col) * LOAD(w, i * KW + j);
        }
    }
    const long at = (plane * out_h + oy) * out_w + ox;
    STORE(y, at, epilogue(sum, residual, at, act_a, act_b));
}

// DW = 8 lanes: AVX2's width, and no more than a 7x7 image's row wastes. Vectors come from LOAD8 (store.h),
// scalar loads that PoCL merges into one vector load, not vload8, a call on PoCL.
#define DW 8

// The first `count` lanes of v (all DW but where the row's last block hangs over its end) through the epilogue
// into y from index at: on the vector at once (cl/epilogue.h), then straight-line stores the compiler
// vectorizes where the block is whole.
inline void store_block(__global store_t* y, float8 v, long at, int count, EPILOGUE_ARGS) {
    union { float8 v; float s[DW]; } lanes = {v};
    if (count == DW) {
        lanes.v = epilogue8(lanes.v, residual, at, act_a, act_b);
        #pragma unroll
        for (int l = 0; l < DW; ++l) STORE(y, at + l, lanes.s[l]);
    } else {
        lanes.v = epilogue8_part(lanes.v, residual, at, count, act_a, act_b);
        for (int l = 0; l < count; ++l) STORE(y, at + l, lanes.s[l]);
    }
}

// depthwise_padded: `padded` holds the input planes with their padding (pad_planes, one row phase), SW column
// phases of padded_h rows of phase_w columns: column c of a padded row is element c / SW of phase c % SW, so
// that the lanes of a tap, SW columns apart, are consecutive. The phases reach past the last block of DW
// pixels: lanes past out_w read zeros.
__kernel OWN_LANES void depthwise_padded(__global store_t* restrict y, __global const store_t* restrict padded,
                               __global const store_t* restrict weight, __global const store_t* restrict bias,
                               const int has_bias, EPILOGUE_ARGS, const int channels, const int multiplier,
                               const int padded_h, const int phase_w, const int out_h, const int out_w,
                               const int stride_h, const int dilation_h, const int dilation_w) {
    const long phase = (long)padded_h * phase_w;  // one column phase to the next
    const int oy = get_global_id(0);
    const long plane = get_global_id(1);
    if (oy >= out_h) return;
    const int o = plane % channels;
    const __global store_t* in = padded + plane / multiplier * SW * phase + oy * stride_h * phase_w;
    float taps[KH * KW];  // the row's weights, in registers for all its blocks
    #pragma unroll
    for (int t = 0; t < KH * KW; ++t) taps[t] = LOAD(weight, o * KH * KW + t);
    const float b = has_bias ? LOAD(bias, o) : 0.0f;
    const long first = (plane * out_h + oy) * out_w;
    for (int ox = 0; ox < out_w; ox += DW) {
        // a sum per kernel row: KH independent chains of KW multiply-adds. One chain of KH * KW would wait on
        // each multiply-add's latency
        float8 row_sums[KH];
        #pragma unroll
        for (int i = 0; i < KH; ++i) {
            row_sums[i] = i == 0 ? b : 0.0f;
            #pragma unroll
            for (int j = 0; j < KW; ++j) {
                const int shift = j * dilation_w;  // lane l reads padded column (ox + l) * SW + shift
                const __global store_t* r = in + i * dilation_h * phase_w + shift % SW * phase + ox + shift / SW;
                row_sums[i] += taps[i * KW + j] * LOAD8(r, 0);
            }
        }
        float8 acc = row_sums[0];
        #pragma unroll
        for (int i = 1; i < KH; ++i) acc += row_sums[i];
        store_block(y, acc, first + ox, (out_w - ox < DW ? out_w - ox : DW), residual, act_a, act_b);
    }
}

// depthwise_rows: the same, from the input itself, at column strides SW of 1 and 2. Lane l of a block of DW
// output pixels reads input column c + l * SW of a row for a tap whose first lane reads column c. Blocks whose
// every tap lies inside the row load their lanes as vectors (row_lanes); they run from a row's first such
// pixel on, the last one slid back to end where the last such block ends, and the few pixels left at either
// end are computed one by one. Kernel rows above or below the input read the nearest row of the input and
// their sums are dropped. The host runs it where such blocks cover all but a few pixels of a row
// (kuiper/opencl/conv2d.py), and depthwise_padded elsewhere.
#if SW == 1
#define row_lanes(r, c) LOAD8(r, c)
#else
// the even lanes of 16 consecutive floats: two vector loads and a shuffle, not a strided load per lane
#define row_lanes(r, c) ((float16)(LOAD8(r, c), LOAD8(r, (c) + 8))).even
#endif

__kernel OWN_LANES void depthwise_rows(__global store_t* restrict y, __global const store_t* restrict x,
                             __global const store_t* restrict weight, __global const store_t* restrict bias,
                             const int has_bias, EPILOGUE_ARGS, const int channels, const int multiplier,
                             const int height, const int width, const int out_h, const int out_w,
                             const int stride_h, const int top, const int left, const int dilation_h,
                             const int dilation_w) {
    const int oy = get_global_id(0);
    const long plane = get_global_id(1);
    if (oy >= out_h) return;
    const int o = plane % channels;
    const __global store_t* in = x + plane / multiplier * height * width;
    float taps[KH * KW];  // the row's weights, in registers for all its blocks
    #pragma unroll
    for (int t = 0; t < KH * KW; ++t) taps[t] = LOAD(weight, o * KH * KW + t);
    const float b = has_bias ? LOAD(bias, o) : 0.0f;
    const long first = (plane * out_h + oy) * out_w;
    int row_at[KH];  // where each kernel row reads in the plane, and whether it is inside the input
    bool row_inside[KH];
    #pragma unroll
    for (int i = 0; i < KH; ++i) {
        const int row = oy * stride_h - top + i * dilation_h;
        row_inside[i] = row >= 0 && row < height;
        row_at[i] = (row < 0 ? 0 : row < height ? row : height - 1) * width;
    }
    // the vector blocks cover [lo, last + DW): from the first pixel whose first tap is inside to the end of the
    // last block whose last tap (at SW = 2 the column after it, which row_lanes loads too) is inside
    const int lo = (left + SW - 1) / SW, room = width + left - (KW - 1) * dilation_w - DW * SW;
    const int last = room < 0 ? -1 : room / SW < out_w - DW ? room / SW : out_w - DW;
    for (int ox = lo; ; ox += DW) {
        const int at = ox < last ? ox : last, c = at * SW - left;
        // a sum per kernel row: KH independent chains of KW multiply-adds
        float8 row_sums[KH];
        #pragma unroll
        for (int i = 0; i < KH; ++i) {
            const __global store_t* r = in + row_at[i];
            row_sums[i] = 0.0f;
            #pragma unroll
            for (int j = 0; j < KW; ++j) row_sums[i] += taps[i * KW + j] * row_lanes(r, c + j * dilation_w);
        }
        float8 acc = b;
        #pragma unroll
        for (int i = 0; i < KH; ++i) acc += row_inside[i] ? row_sums[i] : 0.0f;
        store_block(y, acc, first + at, DW, residual, act_a, act_b);
        if (at == last) break;
    }
    // the pixels left, [0, lo) and [last + DW, out_w), each tap tested
    for (int ox = lo > 0 ? 0 : last + DW; ox < out_w; ox = ox + 1 == lo ? last + DW : ox + 1) {
        const int c = ox * SW - left;
        float sum = b;
        #pragma unroll
        for (int i = 0; i < KH; ++i) {
            #pragma unroll
            for (int j = 0; j < KW; ++j) {
                const int column = c + j * dilation_w;
                if (row_inside[i] && column >= 0 && column < width)
                    sum += taps[i * KW + j] * LOAD(in, row_at[i] + column);
            }
        }
        STORE(y, first + ox, epilogue(sum, residual, first + ox, act_a, act_b));
    }
}

// grouped_rows: grouped convolution on CPUs, cin_g input channels a group, from the same padded copy as
// depthwise_padded. Work-item (oy, z) computes output row oy of OB consecutive output channels of one group, plane
// block z = item * channels / OB + o / OB: each vector of input pixels is loaded once for OB multiply-adds (one
// output channel a work-item ran load-bound, slower than the stack of thin GEMMs from 8 channels a group up).
// Global size (out_h, items * channels / OB); cout_g is a multiple of OB.
#ifdef OB
__kernel OWN_LANES void grouped_rows(__global store_t* restrict y, __global const store_t* restrict padded,
                           __global const store_t* restrict weight, __global const store_t* restrict bias,
                           const int has_bias, EPILOGUE_ARGS, const int channels, const int cout_g, const int cin_g,
                           const int padded_h, const int phase_w, const int out_h, const int out_w,
                           const int stride_h, const int dilation_h, const int dilation_w) {
    const long phase = (long)padded_h * phase_w;  // one column phase to the next
    const int oy = get_global_id(0);
    const int blocks = channels / OB, item = get_global_id(1) / blocks, o = get_global_id(1) % blocks * OB;
    if (oy >= out_h) return;
    // the group's first input plane, and the block's first weight
    const __global store_t* in = padded + ((long)item * (channels / cout_g) + o / cout_g) * cin_g * SW * phase
                                 + oy * stride_h * phase_w;
    const __global store_t* w = weight + (long)o * cin_g * KH * KW;
    const long first = ((long)item * channels + o) * out_h * out_w + oy * out_w;
    for (int ox = 0; ox < out_w; ox += DW) {
        float8 acc[OB];
        #pragma unroll
        for (int k = 0; k < OB; ++k) acc[k] = has_bias ? LOAD(bias, o + k) : 0.0f;
        for (int c = 0; c < cin_g; ++c) {
            const __global store_t* in_c = in + c * SW * phase;
            #pragma unroll
            for (int i = 0; i < KH; ++i) {
                #pragma unroll
                for (int j = 0; j < KW; ++j) {
                    const int shift = j * dilation_w;
                    const __global store_t* r = in_c + i * dilation_h * phase_w + shift % SW * phase + ox + shift / SW;
                    const float8 pixels = LOAD8(r, 0);
                    #pragma unroll
                    for (int k = 0; k < OB; ++k) acc[k] += LOAD(w, (k * cin_g + c) * KH * KW + i * KW + j) * pixels;
                }
            }
        }
        const int count = out_w - ox < DW ? out_w - ox : DW;
        #pragma unroll
        for (int k = 0; k < OB; ++k)
            store_block(y, acc[k], first + (long)k * out_h * out_w + ox, count, residual, act_a, act_b);
    }
}
#endif
#endif

// ---- pad_planes: planes with zeros around them, split into the stride's phases, for *_padded, grouped_rows --
// and cl/gemm.cl's gemm_cpu built with TAPS, which reads a convolution's im2col entries from it.
// Padded row r is row r / row_phases of row phase r % row_phases, and its column c element c / SW of column
// phase c % SW: a plane of the copy is row_phases x SW phase planes, each `rows` = padded_h / row_phases
// (rounded up) rows of phase_w columns. In one phase plane a strided convolution reads like one at stride 1:
// the lanes of a tap, SW columns apart in the input, are consecutive, and so, with row_phases = the stride,
// are an output row's rows (gemm_cpu's padded grid). The rows kernels pass row_phases = 1 and step rows
// themselves. Padded column c is the input's column c - left of row r - top, or 0 outside the input.
// Work-item (r, z) writes padded row r of plane z. Global size (padded_h, planes). Built with the rows kernel's
// options: the column stride a constant here too.
// The loop runs over phase columns k, writing column k of every phase from SW consecutive inputs: one wide
// load split into the phases. A loop per phase, each reading every SW-th input, does not vectorize at SW = 2
// on PoCL.
#ifdef SW
// padded column c of a row, 0 in the padding (the row inside the input or not)
inline float padded_at(const __global store_t* in, bool inside, int c, int left, int width) {
    return inside && c >= left && c < left + width ? LOAD(in, c) : 0.0f;
}

__kernel OWN_LANES void pad_planes(__global store_t* restrict padded, __global const store_t* restrict x,
                                   const int height, const int width, const int padded_h, const int phase_w,
                                   const int top, const int left, const int row_phases) {
    const int r = get_global_id(0);
    const long z = get_global_id(1);
    if (r >= padded_h) return;
    const int rows = (padded_h + row_phases - 1) / row_phases;
    const long phase = (long)rows * phase_w;  // from one column phase's plane to the next
    __global store_t* out = padded + ((z * row_phases + r % row_phases) * SW * rows + r / row_phases) * phase_w;
    const int row = r - top;
    const bool inside = row >= 0 && row < height;
    const __global store_t* in = x + (z * height + (inside ? row : 0)) * width - left;  // in[c]: padded column c
    // [lo, hi): the phase columns whose SW padded columns all lie inside the input; the rest go one by one
    int hi = inside ? (left + width) / SW : 0;
    hi = hi < phase_w ? hi : phase_w;
    const int lo = (left + SW - 1) / SW < hi ? (left + SW - 1) / SW : hi;
    for (int k = 0; k < lo; ++k)
        for (int p = 0; p < SW; ++p) STORE(out, p * phase + k, padded_at(in, inside, k * SW + p, left, width));
    for (int k = lo; k < hi; ++k) {
        #pragma unroll
        for (int p = 0; p < SW; ++p) STORE(out, p * phase + k, LOAD(in, k * SW + p));
    }
    for (int k = hi; k < phase_w; ++k)
        for (int p = 0; p < SW; ++p) STORE(out, p * phase + k, padded_at(in, inside, k * SW + p, left, width));
}
#endif
