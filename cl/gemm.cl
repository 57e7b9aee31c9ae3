// C = A @ B (+ bias), row-major, for Linear, Conv2d (im2col and 1x1) and ConvTranspose2d
// (kuiper/layers/gemm.py launches them).
//
//   A (M, K) with leading dimension lda, B (K, N) with ldb, C (M, N) with ldc, all in elements.
//
// Global dimension 2 runs over a stack of independent products: product z is group g = z % groups of
// item z / groups, and its matrices start at offset + g * group_stride + item * item_stride (one launch
// covers every group of every batch item of a convolution). bias_mode: 0 none, 1 one value per row of C
// (conv: per output channel, bias[g * M + m]), 2 one per column (linear: bias[g * N + n]).
//
// Two variants with the same arguments:
//   gemm_cpu  no local memory: each work-item keeps an MB x (NV * VN) block of C in floatVN registers,
//             the shape a CPU core's vector FMA units want; any local size works.
//   gemm_gpu  a work-group stages TM x TK tiles of A and TK x TN tiles of B in local memory and each
//             work-item accumulates RM x RN outputs from them; local size must be (TN / RN, TM / RM).

#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)

// The offset of product z's matrix, in elements (long: a batch of activations can pass 2^31 elements).
inline long stack_offset(int z, int groups, long offset, long group_stride, long item_stride) {
    return offset + (long)(z % groups) * group_stride + (long)(z / groups) * item_stride;
}

inline float bias_of(__global const float* bias, int bias_mode, int g, int m, int n, int M, int N) {
    return bias_mode == 1 ? bias[g * M + m] : bias_mode == 2 ? bias[g * N + n] : 0.0f;
}

#define STACK_ARGS                                                                                         \
    const int groups, const long off_a, const long off_b, const long off_c, const long group_a,           \
    const long group_b, const long group_c, const long item_a, const long item_b, const long item_c

#ifdef VN
// ---- CPU: register blocks of MB rows x NV vectors of VN columns ------------------------------------------
// Work-item (bx, by, z) computes columns from bx * NV * VN and rows from by * MB: consecutive work-items
// share A's rows (MB x K stays in cache) and walk B left to right, unit stride along dimension 0.
// Edges: rows past M load row M - 1 and are not stored; a column block past N slides left to end at N
// (the host guarantees N >= NV * VN) and stores only the columns the block before it did not.
//
// The inner loop calls no built-in function: PoCL links its built-ins after optimizing, so each fma() or
// vload16() there stays a call that spills every accumulator. Operators (`acc += a * b`, contracted to an
// FMA) and vectors built from scalar loads (merged into one vector load) compile to straight-line code.
#define NB (NV * VN)
#if VN == 16
#define floatV float16
#define LOADV(p) (float16)(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], \
                           p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15])
#elif VN == 4
#define floatV float4
#define LOADV(p) (float4)(p[0], p[1], p[2], p[3])
#elif VN == 1
#define floatV float
#define LOADV(p) (p[0])
#endif

__kernel void gemm_cpu(__global float* restrict C, __global const float* restrict A,
                       __global const float* restrict B, __global const float* restrict bias, const int bias_mode,
                       const int M, const int N, const int K, const int lda, const int ldb, const int ldc,
                       STACK_ARGS) {
    const int bx = get_global_id(0), by = get_global_id(1), z = get_global_id(2);
    const int m0 = by * MB;
    if (bx * NB >= N || m0 >= M) return;
    const int n0 = bx * NB + NB <= N ? bx * NB : N - NB;
    const int fresh = bx * NB - n0;  // leading columns the previous block already stored
    A += stack_offset(z, groups, off_a, group_a, item_a);
    B += stack_offset(z, groups, off_b, group_b, item_b) + n0;
    C += stack_offset(z, groups, off_c, group_c, item_c);

    const __global float* a_row[MB];
    floatV acc[MB][NV];
    #pragma unroll
    for (int r = 0; r < MB; ++r) {
        a_row[r] = A + (long)(m0 + r < M ? m0 + r : M - 1) * lda;
        #pragma unroll
        for (int v = 0; v < NV; ++v) acc[r][v] = 0.0f;
    }
    for (int k = 0; k < K; ++k, B += ldb) {
        floatV b[NV];
        #pragma unroll
        for (int v = 0; v < NV; ++v) b[v] = LOADV((B + v * VN));
        #pragma unroll
        for (int r = 0; r < MB; ++r) {
            const float a = a_row[r][k];
            #pragma unroll
            for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
        }
    }

    const int g = z % groups;
    #pragma unroll
    for (int r = 0; r < MB; ++r) {
        const int m = m0 + r;
        if (m >= M) break;
        union { floatV v[NV]; float s[NB]; } row;  // the block's row, element by element
        #pragma unroll
        for (int v = 0; v < NV; ++v) row.v[v] = acc[r][v];
        __global float* c_row = C + (long)m * ldc + n0;
        for (int c = fresh; c < NB; ++c) c_row[c] = row.s[c] + bias_of(bias, bias_mode, g, m, n0 + c, M, N);
    }
}
#endif

#ifdef TM
// ---- GPU: local-memory tiles with RM x RN register blocks --------------------------------------------------
// Work-item (tx, ty) of the (LX, LY) work-group owns rows ty + i * LY and columns tx + j * LX of the tile:
// neighbouring work-items read neighbouring local-memory words and store neighbouring columns of C.
// Tile loads outside A or B read zeros, so edges and the K tail need no other care.
#define LX (TN / RN)
#define LY (TM / RM)
#define THREADS (LX * LY)

__kernel __attribute__((reqd_work_group_size(LX, LY, 1)))
void gemm_gpu(__global float* restrict C, __global const float* restrict A, __global const float* restrict B,
              __global const float* restrict bias, const int bias_mode, const int M, const int N, const int K,
              const int lda, const int ldb, const int ldc, STACK_ARGS) {
    // A's tile transposed, so that a k-slice of its rows is contiguous; the extra column spreads the
    // transposing stores of consecutive work-items over the memory banks
    __local float a_tile[TK][TM + 1];
    __local float b_tile[TK][TN];
    const int tx = get_local_id(0), ty = get_local_id(1), t = ty * LX + tx;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN, z = get_global_id(2);
    A += stack_offset(z, groups, off_a, group_a, item_a);
    B += stack_offset(z, groups, off_b, group_b, item_b);
    C += stack_offset(z, groups, off_c, group_c, item_c);

    float acc[RM][RN];
    #pragma unroll
    for (int i = 0; i < RM; ++i) {
        #pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
    }
    for (int k0 = 0; k0 < K; k0 += TK) {
        // consecutive work-items load consecutive addresses: along k in A, along n in B
        for (int e = t; e < TM * TK; e += THREADS) {
            const int m = m0 + e / TK, k = k0 + e % TK;
            a_tile[e % TK][e / TK] = m < M && k < K ? A[(long)m * lda + k] : 0.0f;
        }
        for (int e = t; e < TK * TN; e += THREADS) {
            const int k = k0 + e / TN, n = n0 + e % TN;
            b_tile[e / TN][e % TN] = k < K && n < N ? B[(long)k * ldb + n] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int k = 0; k < TK; ++k) {
            float a[RM], b[RN];
            #pragma unroll
            for (int i = 0; i < RM; ++i) a[i] = a_tile[k][ty + i * LY];
            #pragma unroll
            for (int j = 0; j < RN; ++j) b[j] = b_tile[k][tx + j * LX];
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
        const int m = m0 + ty + i * LY;
        #pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int n = n0 + tx + j * LX;
            if (m < M && n < N) C[(long)m * ldc + n] = acc[i][j] + bias_of(bias, bias_mode, g, m, n, M, N);
        }
    }
}
#endif
