// C = A @ B (+ bias) on NVIDIA tensor cores, for half storage (-DKUIPER_HALF): the arguments, the stack of
// products, implicit im2col (-DKH, -DKW) and the epilogue are gemm_gpu's (cl/gemm.cl); kuiper/opencl/gemm.py
// launches it on devices whose compiler takes inline PTX and whose GPU has mma.sync for half (sm_80 and up).
//
// A work-group of WARPS_M x WARPS_N warps computes a TM x TN tile of C, each warp MI x NI products of
// mma.sync.m16n8k16 (half inputs, float accumulators): TM = WARPS_M * MI * 16, TN = WARPS_N * NI * 8. Per step of
// TK = 32 along K the group copies A's TM x TK tile and B's TK x TN tile into local memory, both with k
// contiguous (B transposed), where each lane of a warp reads the pairs of halves its fragments hold as 32-bit
// words. The rows are padded by 8 halves so that the 32 lanes' words of one fragment fall in 32 different banks.
// While the warps multiply one step's tiles, each work-item already holds the next step's elements in registers
// (loaded before the products), so that global memory's latency hides behind the tensor cores' work.
//
// Fragments of m16n8k16 (PTX ISA, "mma.m16n8k16"), lane = 4 g + t:
//   A (16 x 16, row-major): a0 rows g, k 2t..2t+1; a1 row g+8; a2 row g, k 2t+8..; a3 row g+8, k 2t+8..
//   B (16 x 8, by column):  b0 column g, k 2t..2t+1; b1 column g, k 2t+8..
//   C (16 x 8):             c0, c1 row g, columns 2t, 2t+1; c2, c3 row g+8
#include "gemm.h"

#define TM (WARPS_M * MI * 16)
#define TN (WARPS_N * NI * 8)
#define TK 32
#define ROW (TK + 8)  // halves from one local row to the next
#define THREADS (32 * WARPS_M * WARPS_N)
#define A_LOADS (TM * TK / THREADS)  // elements each work-item copies per step
#define B_LOADS (TK * TN / THREADS)
#if THREADS % TK || THREADS % TN || THREADS < TN
#error "the work-group must cover whole rows of the A tile and whole columns of the B tile"
#endif

#define MMA(d, a, b)                                                                                       \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
                 "{%0,%1,%2,%3};"                                                                          \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

inline void store_c(__global store_t* C, __global const store_t* bias, int bias_mode, __global const store_t* residual,
                    float act_a, float act_b, int g, int m, int n, int M, int N, int ldc, float v) {
    if (m >= M || n >= N) return;
    const long at = (long)m * ldc + n;
    STORE(C, at, epilogue(v + bias_of(bias, bias_mode, g, m, n, M, N), residual, at, act_a, act_b));
}

#ifdef KH
// entry (k, n) of the convolution's column matrix, read from the image: 0 in the padding and past K or N
inline ushort im2col_at(const __global ushort* b, int k, int K, int n, int N, int top, int left, int height,
                        int width, int dilation_h, int dilation_w) {
    if (k >= K || n >= N) return 0;
    const int c = k / (KH * KW), i = k / KW % KH, j = k % KW;
    const int y = top + i * dilation_h, x = left + j * dilation_w;
    return y >= 0 && y < height && x >= 0 && x < width ? b[((long)c * height + y) * width + x] : 0;
}
#endif

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void gemm_mma(__global store_t* restrict C, __global const store_t* restrict A, __global const store_t* restrict B,
              __global const store_t* restrict bias, const int bias_mode, EPILOGUE_ARGS, const int M, const int N,
              const int K, const int lda, const int ldb, const int ldc, STACK_ARGS IMAGE_ARGS) {
    // declared as words, which the fragments read: a local array of ushort need only be 2-byte aligned
    __local uint a_words[TM * ROW / 2];
    __local uint b_words[TN * ROW / 2];
    __local ushort* a_tile = (__local ushort*)a_words;
    __local ushort* b_tile = (__local ushort*)b_words;
    const int t = get_local_id(0), warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
    const int wm = warp / WARPS_N * MI * 16, wn = warp % WARPS_N * NI * 8;  // the warp's part of the tile
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN, z = get_global_id(2);
    const __global ushort* a = (const __global ushort*)(A + stack_offset(z, groups, off_a, group_a, item_a));
    const __global ushort* b = (const __global ushort*)(B + stack_offset(z, groups, off_b, group_b, item_b));
    C += stack_offset(z, groups, off_c, group_c, item_c);
    residual += stack_offset(z, groups, off_c, group_c, item_c);

    // the copies: A by rows of k (work-item t takes k = t % TK of rows t / TK + e * THREADS / TK), B by columns
    // (t takes n = n0 + t % TN, k = t / TN + e * THREADS / TN)
    const int ak = t % TK, ar = t / TK, bn = t % TN, bk = t / TN, n = n0 + bn;
#ifdef KH
    const int top = n / out_w * stride_h - pad_h, left = n % out_w * stride_w - pad_w;
#endif
    ushort next_a[A_LOADS], next_b[B_LOADS];
#define FETCH(k0)                                                                                          \
    do {                                                                                                   \
        _Pragma("unroll")                                                                                  \
        for (int e = 0; e < A_LOADS; ++e) {                                                                \
            const int m = m0 + ar + e * (THREADS / TK), k = (k0) + ak;                                     \
            next_a[e] = m < M && k < K ? a[(long)m * lda + k] : 0;                                         \
        }                                                                                                  \
        _Pragma("unroll")                                                                                  \
        for (int e = 0; e < B_LOADS; ++e) next_b[e] = b_at(b, (k0) + bk + e * (THREADS / TN));             \
    } while (0)
#ifdef KH
#define b_at(b, k) im2col_at(b, k, K, n, N, top, left, height, width, dilation_h, dilation_w)
#else
#define b_at(b, k) ((k) < K && n < N ? b[(long)(k) * ldb + n] : 0)
#endif

    float acc[MI][NI][4];
    _Pragma("unroll")
    for (int i = 0; i < MI; ++i) {
        _Pragma("unroll")
        for (int j = 0; j < NI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    }
    FETCH(0);
    for (int k0 = 0; k0 < K; k0 += TK) {
        _Pragma("unroll")
        for (int e = 0; e < A_LOADS; ++e) a_tile[(ar + e * (THREADS / TK)) * ROW + ak] = next_a[e];
        _Pragma("unroll")
        for (int e = 0; e < B_LOADS; ++e) b_tile[bn * ROW + bk + e * (THREADS / TN)] = next_b[e];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < K) FETCH(k0 + TK);  // in flight while the tensor cores work on this step
        _Pragma("unroll")
        for (int ks = 0; ks < TK; ks += 16) {
            uint fa[MI][4], fb[NI][2];
            _Pragma("unroll")
            for (int i = 0; i < MI; ++i) {
                const int row = (wm + i * 16 + g) * ROW / 2 + ks / 2 + q;
                fa[i][0] = a_words[row];
                fa[i][1] = a_words[row + 8 * ROW / 2];
                fa[i][2] = a_words[row + 4];
                fa[i][3] = a_words[row + 8 * ROW / 2 + 4];
            }
            _Pragma("unroll")
            for (int j = 0; j < NI; ++j) {
                const int column = (wn + j * 8 + g) * ROW / 2 + ks / 2 + q;
                fb[j][0] = b_words[column];
                fb[j][1] = b_words[column + 4];
            }
            _Pragma("unroll")
            for (int i = 0; i < MI; ++i) {
                _Pragma("unroll")
                for (int j = 0; j < NI; ++j) MMA(acc[i][j], fa[i], fb[j]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next copies overwrite the tiles
    }

    const int group = z % groups;
    _Pragma("unroll")
    for (int i = 0; i < MI; ++i) {
        const int m = m0 + wm + i * 16 + g;
        _Pragma("unroll")
        for (int j = 0; j < NI; ++j) {
            const int col = n0 + wn + j * 8 + 2 * q;
            store_c(C, bias, bias_mode, residual, act_a, act_b, group, m, col, M, N, ldc, acc[i][j][0]);
            store_c(C, bias, bias_mode, residual, act_a, act_b, group, m, col + 1, M, N, ldc, acc[i][j][1]);
            store_c(C, bias, bias_mode, residual, act_a, act_b, group, m + 8, col, M, N, ldc, acc[i][j][2]);
            store_c(C, bias, bias_mode, residual, act_a, act_b, group, m + 8, col + 1, M, N, ldc, acc[i][j][3]);
        }
    }
}
