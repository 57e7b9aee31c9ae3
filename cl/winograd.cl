// Winograd's F(m x m, 3x3) for a 3x3 stride-1 convolution (kuiper/opencl/winograd.py runs it; the method and
// its matrices are kuiper/winograd.py's). Three steps, the middle one cl/gemm.cl's stacked GEMM:
//
//   winograd_input    each a x a input tile d (a = m + 2; tiles m apart, overlapping by 2) to B^T d B
//   (GEMM)            for each of the a*a positions p: Mp (Cout, tiles) = Up (Cout, Cin) @ Vp (Cin, tiles)
//   winograd_output   each tile's A^T M A, the m x m outputs, plus the bias and the fused epilogue
//
// The host builds them with -DWM=m and the matrices' entries row by row (-DWINO_BT=..., -DWINO_AT=...): after
// unrolling, every matrix entry is a constant, and the `!= 0.0f` tests drop the terms with a zero entry at
// compile time. The products are a macro (PRODUCT): PoCL does not fold the entries through a function's array
// argument, which makes the transforms several times slower. V and M, the transformed tiles, are float
// whatever the storage precision: the transforms add numbers up to ~100x the inputs' size that cancel in the
// end, which half would round away. F(2x2)'s only add and subtract a few, so with -DSTORED_TILES V and M are
// stored as tensors are (cl/store.h), for a GEMM at the storage precision (on tensor cores).
//
// A launch covers the `tiles` tiles of a chunk of whole tile rows, from row `first` of the batch's tile rows on
// (the host keeps a chunk's V and M in the cache on CPUs). Tile t of the chunk is tile g = first * tiles_w + t
// of the batch, tile (ty, tx) of item g / (tiles_h * tiles_w); work-item (t, c) handles one channel of it, so
// consecutive work-items read and write consecutive tiles: V and M are laid out (a*a, channels, tiles).
// The _rows kernels below do the same for CPUs with four tiles a work-item, in the lanes of vectors.
#include "epilogue.h"
#include "lanes.h"

#define WA (WM + 2)

#ifdef STORED_TILES
#define tile_t store_t
#define TILE_LOAD(p, i) LOAD(p, i)
#define TILE_STORE(p, i, v) STORE(p, i, v)
#else
#define tile_t float
#define TILE_LOAD(p, i) ((p)[i])
#define TILE_STORE(p, i, v) ((p)[i] = (v))
#endif

// out (rows x cols) = init + a matrix product summed over WA: out[i_][j_] adds entry * value for k_ = 0 .. WA-1,
// `entry` the transform matrix's entry and `value` the tile's, both written in i_, j_ and k_: B^T d is
// PRODUCT(e, .., bt[i_][k_], d[k_][j_]), e B is PRODUCT(v, .., bt[j_][k_], e[i_][k_]). For tiles held in floats,
// or in float4s (four tiles, one a lane), adding the terms in one order for both.
#define PRODUCT(out, rows, cols, init, entry, value)                                                    \
    _Pragma("unroll") for (int i_ = 0; i_ < (rows); ++i_)                                               \
    _Pragma("unroll") for (int j_ = 0; j_ < (cols); ++j_) {                                             \
        out[i_][j_] = (init);                                                                           \
        _Pragma("unroll") for (int k_ = 0; k_ < WA; ++k_)                                               \
            if ((entry) != 0.0f) out[i_][j_] += (entry) * (value);                                      \
    }

__kernel OWN_LANES void winograd_input(__global tile_t* restrict V, __global const store_t* restrict x,
                             const int channels, const int height, const int width, const int pad_h, const int pad_w,
                             const int tiles_h, const int tiles_w, const int tiles, const int first) {
    const int t = get_global_id(0), c = get_global_id(1);
    if (t >= tiles) return;
    const int per_item = tiles_h * tiles_w, g = first * tiles_w + t;
    const int top = g % per_item / tiles_w * WM - pad_h, left = t % tiles_w * WM - pad_w;
    const __global store_t* plane = x + ((long)(g / per_item) * channels + c) * height * width;
    const float bt[WA][WA] = {WINO_BT};

    float d[WA][WA];  // the tile, 0 in the padding
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        const int y = top + i;
        #pragma unroll
        for (int j = 0; j < WA; ++j) {
            const int col = left + j;
            d[i][j] = y >= 0 && y < height && col >= 0 && col < width ? LOAD(plane, y * width + col) : 0.0f;
        }
    }
    float e[WA][WA], v[WA][WA];
    PRODUCT(e, WA, WA, 0.0f, bt[i_][k_], d[k_][j_])  // B^T d
    PRODUCT(v, WA, WA, 0.0f, bt[j_][k_], e[i_][k_])  // (B^T d) B: row j of B^T is column j of B
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) TILE_STORE(V, ((long)(i * WA + j) * channels + c) * tiles + t, v[i][j]);
    }
}

// Not OWN_LANES: Intel's runtime then merges work-items into vector lanes as PoCL does, which makes a fused
// activation vector code
__kernel void winograd_output(__global store_t* restrict y, __global const tile_t* restrict M,
                              __global const store_t* restrict bias, const int has_bias, EPILOGUE_ARGS,
                              const int channels, const int out_h, const int out_w, const int tiles_h,
                              const int tiles_w, const int tiles, const int first) {
    const int t = get_global_id(0), o = get_global_id(1);
    if (t >= tiles) return;
    const int per_item = tiles_h * tiles_w, g = first * tiles_w + t;
    const int top = g % per_item / tiles_w * WM, left = t % tiles_w * WM;
    const long plane = ((long)(g / per_item) * channels + o) * out_h * out_w;
    const float at[WM][WA] = {WINO_AT};

    float m[WA][WA];
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) m[i][j] = TILE_LOAD(M, ((long)(i * WA + j) * channels + o) * tiles + t);
    }
    const float b = has_bias ? LOAD(bias, o) : 0.0f;
    float f[WM][WA], s[WM][WM];
    PRODUCT(f, WM, WA, 0.0f, at[i_][k_], m[k_][j_])  // A^T M
    PRODUCT(s, WM, WM, b, at[j_][k_], f[i_][k_])     // (A^T M) A, plus the bias
    #pragma unroll
    for (int i = 0; i < WM; ++i) {
        #pragma unroll
        for (int j = 0; j < WM; ++j) {  // stored where the tile lies inside the output
            if (top + i < out_h && left + j < out_w) {
                const long index = plane + (top + i) * out_w + left + j;
                STORE(y, index, epilogue(s[i][j], residual, index, act_a, act_b));
            }
        }
    }
}

// ---- CPUs: a work-item per channel and run of four tiles of one tile row ---------------------------------
// The four tiles' values sit in the lanes of float4s: each transform step is one vector operation for four
// tiles, and the 36 stores are four consecutive floats each. (Neighbouring tiles overlap by two columns, so the
// run reads 18 columns a row.) Intel's runtime runs winograd_input as scalar code (OWN_LANES; merged, its
// gathers make ResNet-18 slower at batch 1), and the PoCL wheel's AVX2 merge of it is slow too. PoCL compiling
// for AVX-512 merges winograd_input into 16-lane vectors and is faster with it than with this kernel: the
// rule's choice (kuiper/opencl/winograd.py). Global size (tile rows of the batch * runs a row, channels).
#define RUN 4
#define SPAN (RUN * WM + 2)

// The run of tiles of work-item s: its tile row `row` of the chunk, its first tile column `tx`
inline void tile_run(int s, int tiles_w, int* row, int* tx) {
    const int runs = (tiles_w + RUN - 1) / RUN;
    *row = s / runs;
    *tx = s % runs * RUN;
}

// Columns col0 .. col0 + SPAN - 1 of row y of a plane, 0 outside it
inline void load_span(float* r, const __global store_t* plane, int y, int col0, int height, int width) {
    if (y < 0 || y >= height) {
        #pragma unroll
        for (int j = 0; j < SPAN; ++j) r[j] = 0.0f;
    } else if (col0 >= 0 && col0 + SPAN <= width) {  // no test per column: straight vector loads
        #pragma unroll
        for (int j = 0; j < SPAN; ++j) r[j] = LOAD(plane, y * width + col0 + j);
    } else {
        #pragma unroll
        for (int j = 0; j < SPAN; ++j) {
            const int col = col0 + j;
            r[j] = col >= 0 && col < width ? LOAD(plane, y * width + col) : 0.0f;
        }
    }
}

__kernel OWN_LANES void winograd_input_rows(__global float* restrict V, __global const store_t* restrict x,
                                  const int channels, const int height, const int width, const int pad_h,
                                  const int pad_w, const int tiles_h, const int tiles_w, const int tiles,
                                  const int first) {
    int row, tx;
    tile_run(get_global_id(0), tiles_w, &row, &tx);
    const int c = get_global_id(1), r = first + row;  // r: the tile row in the batch
    const int top = r % tiles_h * WM - pad_h, col0 = tx * WM - pad_w;
    const __global store_t* plane = x + ((long)(r / tiles_h) * channels + c) * height * width;
    const float bt[WA][WA] = {WINO_BT};

    float4 d[WA][WA];  // d[i][j]: the four tiles' (i, j) entries
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        float r[SPAN];
        load_span(r, plane, top + i, col0, height, width);
        #pragma unroll
        for (int j = 0; j < WA; ++j) d[i][j] = (float4)(r[j], r[j + WM], r[j + 2 * WM], r[j + 3 * WM]);
    }
    float4 e[WA][WA], v[WA][WA];  // as in winograd_input: the same sums to the bit
    PRODUCT(e, WA, WA, 0.0f, bt[i_][k_], d[k_][j_])
    PRODUCT(v, WA, WA, 0.0f, bt[j_][k_], e[i_][k_])
    const int t = row * tiles_w + tx, count = min(tiles_w - tx, RUN);
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) {
            __global float* out = V + ((long)(i * WA + j) * channels + c) * tiles + t;
            if (count == RUN) {
                vstore4(v[i][j], 0, out);
            } else {
                out[0] = v[i][j].s0;
                if (count > 1) out[1] = v[i][j].s1;
                if (count > 2) out[2] = v[i][j].s2;
            }
        }
    }
}

// winograd_output for CPUs, as winograd_input_rows: a work-item per output channel and run of four tiles of a
// tile row, the tiles in the lanes of float4s. Each of its output rows is 16 consecutive outputs (for F(4x4)
// only), which go through the vector epilogue (epilogue16) and out together, faster than winograd_output on
// Intel's runtime and the PoCL wheel. Global size as winograd_input_rows'.
#if WM == 4
__kernel OWN_LANES void winograd_output_rows(__global store_t* restrict y, __global const float* restrict M,
                                   __global const store_t* restrict bias, const int has_bias, EPILOGUE_ARGS,
                                   const int channels, const int out_h, const int out_w, const int tiles_h,
                                   const int tiles_w, const int tiles, const int first) {
    int row, tx;
    tile_run(get_global_id(0), tiles_w, &row, &tx);
    const int o = get_global_id(1), r = first + row;  // r: the tile row in the batch
    const int top = r % tiles_h * WM, left = tx * WM;
    const long plane = ((long)(r / tiles_h) * channels + o) * out_h * out_w;
    const int t = row * tiles_w + tx, count = min(tiles_w - tx, RUN);
    const float at[WM][WA] = {WINO_AT};

    float4 m[WA][WA];
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) {
            const __global float* in = M + ((long)(i * WA + j) * channels + o) * tiles + t;
            m[i][j] = count == RUN ? vload4(0, in)
                                   : (float4)(in[0], count > 1 ? in[1] : 0.0f, count > 2 ? in[2] : 0.0f, 0.0f);
        }
    }
    const float b = has_bias ? LOAD(bias, o) : 0.0f;
    float4 f[WM][WA], g[WM][WM];  // g[i][j]: output (i, j) of the four tiles
    PRODUCT(f, WM, WA, 0.0f, at[i_][k_], m[k_][j_])
    PRODUCT(g, WM, WM, b, at[j_][k_], f[i_][k_])
    const int columns = min(out_w - left, RUN * WM);
    #pragma unroll
    for (int i = 0; i < WM; ++i) {
        if (top + i >= out_h) break;
        const long at_row = plane + (long)(top + i) * out_w + left;
        union { float16 v; float s[16]; } lanes = {(float16)(g[i][0].s0, g[i][1].s0, g[i][2].s0, g[i][3].s0,
                                                             g[i][0].s1, g[i][1].s1, g[i][2].s1, g[i][3].s1,
                                                             g[i][0].s2, g[i][1].s2, g[i][2].s2, g[i][3].s2,
                                                             g[i][0].s3, g[i][1].s3, g[i][2].s3, g[i][3].s3)};
        if (columns == RUN * WM) {
            lanes.v = epilogue16(lanes.v, residual, at_row, act_a, act_b);
            #pragma unroll
            for (int l = 0; l < RUN * WM; ++l) STORE(y, at_row + l, lanes.s[l]);
        } else {
            lanes.v = epilogue16_part(lanes.v, residual, at_row, columns, act_a, act_b);
            for (int l = 0; l < columns; ++l) STORE(y, at_row + l, lanes.s[l]);
        }
    }
}
#endif
