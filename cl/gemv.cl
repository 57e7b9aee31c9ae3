// C = A @ B (+ bias) for products of a few rows, with gemm_gpu's arguments (kuiper/opencl/gemm.py launches it):
// a decode step multiplies one row per sequence by every weight matrix, and its time is that of reading B once.
//
// Work-group (LX, LK) covers 4 * LX columns of C: work-item (x, kk) owns columns n .. n + 3 (one float4 of each
// row of B) and sums rows k = kk, kk + LK, ... of B for them, for up to ROWS rows of A (group_id(1) picks the
// block of ROWS rows; a product of more rows reads B once per block). Consecutive work-items read consecutive
// float4 of one row of B, and a warp several rows: in fp32 every byte of each 32-byte sector it fetches is used. The
// group then adds its LK partial sums in local memory, a halving tree, and stores C with the bias and epilogue.
//
// With SPLIT defined (a product with too few column groups to fill the device), global dimension 2 runs over
// stack x `slices`: slice s sums k in [s * span, (s + 1) * span) only and writes its partial sums, no bias or
// epilogue, to `partial`, laid out as gemm_gpu's split-K writes them; gemm_sum (cl/gemm.cl) adds them up.

#include "gemm.h"

#if LK & (LK - 1)
#error "LK must be a power of two"
#endif

// Row k of B at columns n .. n + 3, zeros past N
inline float4 b_row4(__global const store_t* B, long at, int n, int N) {
    if (n + 3 < N) return LOAD4(B + at, 0);
    return (float4)(LOAD(B, at), n + 1 < N ? LOAD(B, at + 1) : 0.0f, n + 2 < N ? LOAD(B, at + 2) : 0.0f, 0.0f);
}

__kernel __attribute__((reqd_work_group_size(LX, LK, 1)))
void gemv(__global store_t* restrict C, __global const store_t* restrict A, __global const store_t* restrict B,
          __global const store_t* restrict bias, const int bias_mode, EPILOGUE_ARGS, const int M, const int N,
          const int K, const int lda, const int ldb, const int ldc, STACK_ARGS SPLIT_ARGS) {
    __local float4 sums[LK][LX];
    const int x = get_local_id(0), kk = get_local_id(1);
    const int n = 4 * get_global_id(0), m0 = get_group_id(1) * ROWS, rows = min(ROWS, M - m0);
    SELECT_PRODUCT;
    A += (long)m0 * lda;

    float4 acc[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = (float4)(0.0f);
    if (n < N) {
        #pragma unroll 4
        for (int k = k_begin + kk; k < k_end; k += LK) {
            const float4 b = b_row4(B, (long)k * ldb + n, n, N);
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                if (r < rows) acc[r] += LOAD(A, (long)r * lda + k) * b;
            }
        }
    }

    const int g = z % groups;
    for (int r = 0; r < rows; ++r) {
        sums[kk][x] = acc[r];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int step = LK / 2; step > 0; step >>= 1) {
            if (kk < step) sums[kk][x] += sums[kk + step][x];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (kk == 0) {
            const float4 v = sums[0][x];
            const int m = m0 + r;
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (n + j >= N) break;
                const float s = j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
#ifdef SPLIT
                partial[((long)get_global_id(2) * M + m) * N + n + j] = s;
#else
                const long at = (long)m * ldc + n + j;
                STORE(C, at, epilogue(s + bias_of(bias, bias_mode, g, m, n + j, M, N), residual, at, act_a, act_b));
#endif
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next row's partial sums overwrite these
    }
}
