// C = A @ B (+ bias), row-major, for Linear, Conv2d (im2col, implicit im2col, 1x1) and ConvTranspose2d
// (kuiper/opencl/gemm.py launches them).
//
//   A (M, K) with leading dimension lda, B (K, N) with ldb, C (M, N) with ldc, all in elements.
//
// Global dimension 2 runs over a stack of independent products: product z is group g = z % groups of
// item z / groups, and its matrices start at offset + g * group_stride + item * item_stride (one launch
// covers every group of every batch item of a convolution). bias_mode: 0 none, 1 one value per row of C
// (conv: per output channel, bias[g * M + m]), 2 one per column (linear: bias[g * N + n]).
//
// The epilogue (cl/epilogue.h) runs on each value of C as it is stored, after the bias.
//
// Two variants with the same arguments:
//   gemm_cpu  no local memory: each work-item keeps an MB x (NV * VN) block of C in floatVN registers,
//             the shape a CPU core's vector FMA units want; any local size works.
//   gemm_gpu  a work-group stages TM x TK tiles of A and TK x TN tiles of B in local memory and each
//             work-item accumulates RM x RN outputs from them; local size must be (TN / RN, TM / RM).
//             Built with KH and KW, it reads B as implicit im2col of a convolution's input.

#include "gemm.h"
#include "lanes.h"

#ifdef VN
// ---- CPU: register blocks of MB rows x NV vectors of VN columns ------------------------------------------
// Work-item (bx, by, z) computes columns from bx * NV * VN and rows from by * MB: consecutive work-items
// share A's rows (MB x K stays in cache) and walk B left to right, unit stride along dimension 0.
// Edges: rows past M load row M - 1 and are not stored; a column block past N slides left to end at N
// (the host guarantees N >= NV * VN) and stores only the columns the block before it did not.
//
// With TAPS defined, B is a convolution's input as cl/conv.cl's pad_planes lays it out: padding written out, rows
// and columns split into the stride's phases, so that in each phase plane the layer reads as at stride 1. The
// blocks run along output rows, out_w >= NB pixels each: work-item bx takes block bx % row_blocks of output row
// oy = bx / row_blocks (the last one slides left as above), and im2col's row k for it is the NB floats at
// B + taps[k] + oy * row_pitch + n0. Or the host passes a phase plane's padded grid as one long row (out_h 1):
// its rows grid_pitch floats apart (the padded row), of which the first grid_w (the output row) are stored;
// short output rows then need no block of their own, and the columns on the padding are computed and dropped.
// Otherwise grid_pitch = grid_w.
//
// The inner loop calls no built-in function: PoCL links its built-ins after optimizing, so each fma() or
// vload16() there stays a call that spills every accumulator. Operators (`acc += a * b`, contracted to an
// FMA) and vectors built from scalar loads (merged into one vector load) compile to straight-line code.
#define NB (NV * VN)
#if defined(GLU) && (NV != 2 || VN != 16 || defined(TAPS))
#error "GLU stores pairs of 16-column vectors: NV = 2, VN = 16, no TAPS"
#endif
#ifdef GLU
#include "activations.h"
#endif
#ifdef TAPS
#define TAPS_ARGS , __global const int* restrict taps, const int out_h, const int out_w, const int row_pitch, \
    const int grid_pitch, const int grid_w
#else
#define TAPS_ARGS
#endif
#if VN == 16
#define floatV float16
#define epilogueV epilogue16
#ifdef KUIPER_HALF  // one call, not 16 inlined conversions: PoCL compiles the unrolled form for seconds
#define LOADV(p) vload_half16(0, p)
#else
#define LOADV(p) (float16)(LOAD(p, 0), LOAD(p, 1), LOAD(p, 2), LOAD(p, 3), LOAD(p, 4), LOAD(p, 5), LOAD(p, 6), \
                           LOAD(p, 7), LOAD(p, 8), LOAD(p, 9), LOAD(p, 10), LOAD(p, 11), LOAD(p, 12), LOAD(p, 13), \
                           LOAD(p, 14), LOAD(p, 15))
#endif
#elif VN == 4
#define floatV float4
#define epilogueV epilogue4
#define LOADV(p) (float4)(LOAD(p, 0), LOAD(p, 1), LOAD(p, 2), LOAD(p, 3))
#elif VN == 1
#define floatV float
#define epilogueV epilogue
#define LOADV(p) LOAD(p, 0)
#endif

__kernel OWN_LANES void gemm_cpu(__global store_t* restrict C, __global const store_t* restrict A,
                       __global const store_t* restrict B, __global const store_t* restrict bias, const int bias_mode,
                       EPILOGUE_ARGS,
                       const int M, const int N, const int K, const int lda, const int ldb, const int ldc,
                       STACK_ARGS TAPS_ARGS) {
    const int z = get_global_id(2), m0 = get_global_id(1) * MB;
#ifdef TAPS  // block bx of output row oy: C's columns from oy * out_w + n0, B's from oy * row_pitch + n0
    const int row_blocks = (out_w + NB - 1) / NB, oy = get_global_id(0) / row_blocks;
    const int bx = get_global_id(0) % row_blocks, width = out_w;
    if (oy >= out_h || m0 >= M) return;
#else
    const int oy = 0, bx = get_global_id(0), width = N, row_pitch = 0;
    if (bx * NB >= N || m0 >= M) return;
#endif
    const int n0 = bx * NB + NB <= width ? bx * NB : width - NB;
    const int fresh = bx * NB - n0;  // leading columns the previous block already stored
    A += stack_offset(z, groups, off_a, group_a, item_a);
    B += stack_offset(z, groups, off_b, group_b, item_b) + (long)oy * row_pitch + n0;
    C += stack_offset(z, groups, off_c, group_c, item_c) + oy * width;
    residual += stack_offset(z, groups, off_c, group_c, item_c) + oy * width;

    const __global store_t* a_row[MB];
    floatV acc[MB][NV];
    #pragma unroll
    for (int r = 0; r < MB; ++r) {
        a_row[r] = A + (long)(m0 + r < M ? m0 + r : M - 1) * lda;
        #pragma unroll
        for (int v = 0; v < NV; ++v) acc[r][v] = 0.0f;
    }
    int k0 = 0;
#ifdef STREAMS
    // the first 2 * split of K as two halves side by side: the work-item then reads B from memory as two
    // streams, which the cores' prefetchers serve faster than one (a decode step's products, a classifier's)
    const int split = K >= STREAMS ? K / 2 : 0;
    floatV acc2[MB][NV];
    #pragma unroll
    for (int r = 0; r < MB; ++r) {
        #pragma unroll
        for (int v = 0; v < NV; ++v) acc2[r][v] = 0.0f;
    }
    for (int k = 0; k < split; ++k) {
        const __global store_t* row = B + (long)k * ldb;
        const __global store_t* row2 = B + (long)(k + split) * ldb;
        floatV b[NV], b2[NV];
        #pragma unroll
        for (int v = 0; v < NV; ++v) {
            b[v] = LOADV((row + v * VN));
            b2[v] = LOADV((row2 + v * VN));
        }
        #pragma unroll
        for (int r = 0; r < MB; ++r) {
            const float a = LOAD(a_row[r], k), a2 = LOAD(a_row[r], k + split);
            #pragma unroll
            for (int v = 0; v < NV; ++v) {
                acc[r][v] += a * b[v];
                acc2[r][v] += a2 * b2[v];
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < MB; ++r) {
        #pragma unroll
        for (int v = 0; v < NV; ++v) acc[r][v] += acc2[r][v];
    }
    k0 = 2 * split;
#endif
    for (int k = k0; k < K; ++k) {
#ifdef TAPS
        const __global store_t* row = B + taps[k];
#else
        const __global store_t* row = B + (long)k * ldb;
#endif
        floatV b[NV];
        #pragma unroll
        for (int v = 0; v < NV; ++v) b[v] = LOADV((row + v * VN));
        #pragma unroll
        for (int r = 0; r < MB; ++r) {
            const float a = LOAD(a_row[r], k);
            #pragma unroll
            for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
        }
    }

    const int g = z % groups;
#ifdef TAPS  // where column n0 is stored: n0 itself along an output row (grid_pitch == grid_w)
    const int gy = n0 / grid_pitch, gx = n0 - gy * grid_pitch;
    const bool consecutive = gx + NB <= grid_w;  // the whole block on one output row
    const long first = (long)gy * grid_w + gx;
    // else where each column goes: column n of the padded grid is output pixel (n / grid_pitch, n % grid_pitch),
    // or -1 on the padding; found once for all the block's rows, stepping, with no division per column
    int place[NB];
    if (!consecutive) {
        int y = gy, x = gx;
        for (int c = 0; c < NB; ++c) {
            place[c] = x < grid_w ? y * grid_w + x : -1;
            if (++x == grid_pitch) x = 0, ++y;
        }
    }
#else
    const bool consecutive = true;
    const long first = n0;
#endif
#if !defined(KUIPER_HALF) || defined(GLU)
    float column_bias[NB];  // Linear's bias, read once for all the block's rows
    #pragma unroll
    for (int c = 0; c < NB; ++c) column_bias[c] = bias_mode == 2 && fresh == 0 ? LOAD(bias, g * N + n0 + c) : 0.0f;
#endif
    #pragma unroll
    for (int r = 0; r < MB; ++r) {
        const int m = m0 + r;
        if (m >= M) break;
#ifdef GLU  // vector 0 holds 16 columns of a gate, vector 1 the same 16 of the up projection: the block's outputs
            // are silu(gate) * up, 16 of them from column first / 2 of C
        union { floatV v[NV]; float s[NB]; } biased;
        #pragma unroll
        for (int c = 0; c < NB; ++c) biased.s[c] = column_bias[c];
        union { floatV v; float s[VN]; } glu = {act_silu16(acc[r][0] + biased.v[0], 0.0f, 0.0f)
                                                * (acc[r][1] + biased.v[1])};
        #pragma unroll
        for (int c = 0; c < VN; ++c) STORE(C, (long)m * ldc + first / 2 + c, glu.s[c]);
        continue;
#endif
        union { floatV v[NV]; float s[NB]; } row;  // the block's row, element by element
        #pragma unroll
        for (int v = 0; v < NV; ++v) row.v[v] = acc[r][v];
        const long at = (long)m * ldc + first;
#ifndef KUIPER_HALF  // half storage takes the loop: the unrolled stores compile for seconds on PoCL
        if (fresh == 0 && consecutive) {
            // the common case, unrolled with the row's bias value or the columns': straight-line stores the
            // compiler vectorizes. The general loop below costs more than the products when K is short
            // (Winograd's K = Cin, ConvNeXt-T's first Linears' K = 96)
            const float b = bias_mode == 1 ? LOAD(bias, g * M + m) : 0.0f;
            #pragma unroll
            for (int v = 0; v < NV; ++v) {  // the epilogue on whole vectors (cl/epilogue.h), then their lanes stored
                const floatV sum = acc[r][v] + b + LOADV((column_bias + v * VN));
                union { floatV v; float s[VN]; } out = {epilogueV(sum, residual, at + v * VN, act_a, act_b)};
                #pragma unroll
                for (int c = 0; c < VN; ++c) STORE(C, at + v * VN + c, out.s[c]);
            }
            continue;
        }
#endif
        for (int c = fresh; c < NB; ++c) {
            long to = at + c;
#ifdef TAPS
            if (!consecutive) {
                if (place[c] < 0) continue;
                to = (long)m * ldc + place[c];
            }
#endif
            const float v = row.s[c] + bias_of(bias, bias_mode, g, m, n0 + c, M, N);
            STORE(C, to, epilogue(v, residual, to, act_a, act_b));
        }
    }
}
#endif

#ifdef TM
// ---- GPU: local-memory tiles with RM x RN register blocks --------------------------------------------------
// The (LX, LY) work-group computes a TM x TN tile of C. Tiles hold float4 groups of 4 rows (A) or 4 columns (B),
// and work-item (tx, ty) owns the row groups ty + i * LY and the column groups tx + j * LX: each step of k
// reads RM / 4 + RN / 4 float4 from local memory (neighbouring work-items: neighbouring float4, no bank
// conflicts) for RM * RN multiply-adds, and stores to C come out as runs of 4 columns per work-item, 256
// contiguous bytes per 16 work-items. Tile loads outside A or B read zeros, so edges and the K tail need no other care.
//
// With SPLIT defined (split-K, for products with too few tiles to fill the device), global dimension 2 runs
// over stack x `slices`: slice s sums the k in [s * span, (s + 1) * span) only, and writes its partial tile,
// without bias or epilogue, to `partial` (dense M x N float per product and slice); gemm_sum adds the slices.
//
// With KH and KW defined, B is implicit im2col (Conv2d): B points at the stack of input images, and entry
// (k, n) of the column matrix, k = (c, i, j) over cin_g x KH x KW and n = (oy, ox) over the output pixels, is
// read from the image where it lies, 0 in the padding (the geometry of cl/conv.cl's im2col). No column
// matrix is written or read back; KH and KW as macros make the division of k by them cheap.
#define LX (TN / RN)
#define LY (TM / RM)
#define THREADS (LX * LY)
#if RM % 4 || RN % 4 || THREADS % (TN / 4)
#error "RM and RN must be multiples of 4, and the work-group a multiple of TN / 4"
#endif

// A[m][k] or 0 outside A
inline float a_at(const __global store_t* A, int m, int k, int M, int K, int lda) {
    return m < M && k < K ? LOAD(A, (long)m * lda + k) : 0.0f;
}

__kernel __attribute__((reqd_work_group_size(LX, LY, 1)))
void gemm_gpu(__global store_t* restrict C, __global const store_t* restrict A, __global const store_t* restrict B,
              __global const store_t* restrict bias, const int bias_mode, EPILOGUE_ARGS, const int M, const int N,
              const int K, const int lda, const int ldb, const int ldc, STACK_ARGS IMAGE_ARGS SPLIT_ARGS) {
    // A's tile transposed: a_tile[k][q] holds rows 4q..4q+3 at k. The extra float4 per row spreads the
    // transposing stores of consecutive work-items (consecutive k) over the memory banks.
    __local float4 a_tile[TK][TM / 4 + 1];
    __local float4 b_tile[TK][TN / 4];
    const int tx = get_local_id(0), ty = get_local_id(1), t = ty * LX + tx;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    SELECT_PRODUCT;

    // every B load of this work-item is in the same 4 columns (THREADS is a multiple of TN / 4)
    const int p = t % (TN / 4), n = n0 + 4 * p;
    const int4 column = n + (int4)(0, 1, 2, 3);
    const int4 in_b = column < N;
#ifdef KH
    // where each of the 4 output pixels' windows starts in the image
    const int4 top = column / out_w * stride_h - pad_h, left = column % out_w * stride_w - pad_w;
#endif

    float acc[RM][RN];
    #pragma unroll
    for (int i = 0; i < RM; ++i) {
        #pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
    }
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
        // consecutive work-items load along k in A (rows are contiguous in k) and along n in B
        for (int e = t; e < TK * TM / 4; e += THREADS) {
            const int k = k0 + e % TK, m = m0 + 4 * (e / TK);
            a_tile[e % TK][e / TK] = (float4)(a_at(A, m, k, M, k_end, lda), a_at(A, m + 1, k, M, k_end, lda),
                                              a_at(A, m + 2, k, M, k_end, lda), a_at(A, m + 3, k, M, k_end, lda));
        }
        for (int e = t; e < TK * TN / 4; e += THREADS) {
            const int k = k0 + e / (TN / 4);
            float4 v = 0.0f;
            if (k < k_end) {
#ifdef KH
                const int c = k / (KH * KW), i = k / KW % KH, j = k % KW;
                const int4 y = top + i * dilation_h, x = left + j * dilation_w;
                const int4 inside = in_b & (y >= 0) & (y < height) & (x >= 0) & (x < width);
                const __global store_t* plane = B + (long)c * height * width;
                v = (float4)(inside.x ? LOAD(plane, y.x * width + x.x) : 0.0f,
                             inside.y ? LOAD(plane, y.y * width + x.y) : 0.0f,
                             inside.z ? LOAD(plane, y.z * width + x.z) : 0.0f,
                             inside.w ? LOAD(plane, y.w * width + x.w) : 0.0f);
#else
                const __global store_t* row = B + (long)k * ldb + n;
                v = (float4)(in_b.x ? LOAD(row, 0) : 0.0f, in_b.y ? LOAD(row, 1) : 0.0f, in_b.z ? LOAD(row, 2) : 0.0f,
                             in_b.w ? LOAD(row, 3) : 0.0f);
#endif
            }
            b_tile[e / (TN / 4)][p] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int k = 0; k < TK; ++k) {
            float a[RM], b[RN];
            #pragma unroll
            for (int i = 0; i < RM / 4; ++i) vstore4(a_tile[k][ty + i * LY], i, a);
            #pragma unroll
            for (int j = 0; j < RN / 4; ++j) vstore4(b_tile[k][tx + j * LX], j, b);
            #pragma unroll
            for (int i = 0; i < RM; ++i) {
                #pragma unroll
                for (int j = 0; j < RN; ++j) acc[i][j] += a[i] * b[j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next loads overwrite the tiles
    }

    const int g = z % groups;
    #pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int m = m0 + 4 * (ty + i / 4 * LY) + i % 4;
        #pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int n = n0 + 4 * (tx + j / 4 * LX) + j % 4;
            if (m >= M || n >= N) continue;
#ifdef SPLIT
            partial[((long)get_global_id(2) * M + m) * N + n] = acc[i][j];
#else
            const long at = (long)m * ldc + n;
            STORE(C, at, epilogue(acc[i][j] + bias_of(bias, bias_mode, g, m, n, M, N), residual, at, act_a, act_b));
#endif
        }
    }
}
#endif

// ---- split-K's sum: C = the slices' partial products added up, then the bias and the epilogue -------------
// Global size (N, M, stack); slice s of product z is at partial + ((z * slices + s) * M) * N.
__kernel void gemm_sum(__global store_t* restrict C, __global const float* restrict partial,
                       __global const store_t* restrict bias, const int bias_mode, EPILOGUE_ARGS, const int M,
                       const int N, const int ldc, const int slices, STACK_ARGS) {
    const int n = get_global_id(0), m = get_global_id(1), z = get_global_id(2);
    if (n >= N || m >= M) return;
    float v = bias_of(bias, bias_mode, z % groups, m, n, M, N);
    for (int s = 0; s < slices; ++s) v += partial[((long)(z * slices + s) * M + m) * N + n];
    const long at = stack_offset(z, groups, off_c, group_c, item_c) + (long)m * ldc + n;
    STORE(C, at, epilogue(v, residual, at, act_a, act_b));
}
