// C = A @ B (+ bias) on NVIDIA tensor cores: with half storage (-DKUIPER_HALF) on half inputs, with float
// storage and -DKUIPER_TF32 on TF32 inputs (float's exponent, 10 bits of mantissa, rounded to nearest). The
// arguments, the stack of products, implicit im2col (-DKH, -DKW) and the epilogue are gemm_gpu's (cl/gemm.cl);
// kuiper/opencl/gemm.py launches it on devices whose compiler takes inline PTX and whose GPU has mma.sync for
// both (sm_80 and up).
//
// A work-group of WARPS_M x WARPS_N warps computes a TM x TN tile of C, each warp MI x NI products of mma.sync
// (float accumulators), m16n8k16 for half and m16n8k8 for TF32: TM = WARPS_M * MI * 16, TN = WARPS_N * NI * 8.
// Per step of TK = 32 along K the group copies A's TM x TK tile into local memory with k contiguous, where each
// lane reads its A fragments' elements as 32-bit words (two halves, or one TF32), and B's TK x TN tile with n
// contiguous, as B lies in global memory. Local rows are padded so that the 32 lanes' reads of one fragment fall
// in 32 different banks. With -DVEC_A (-DVEC_B), which the host sets where the operand's rows and offsets are
// multiples of 16 bytes, the copies move 16 bytes a work-item; else an element (implicit im2col's B always).
// A's rows may end mid-vector (K any): the last vector of a row is read element by element.
// While the warps multiply one step's tiles, each work-item already holds the next step's elements in
// registers (loaded before the products), so that global memory's latency hides behind the tensor cores' work.
//
// Fragments (PTX ISA, "mma.m16n8k16" and "mma.m16n8k8"), lane = 4 g + t, w the word of k = 0 .. KSTEP - 1
// that lane t reads (half: k 2t and 2t+1; TF32: k t), w + 4 the word KSTEP / 2 further along k:
//   A (16 x KSTEP, row-major): a0 row g, word w; a1 row g+8, word w; a2 row g, word w+4; a3 row g+8, word w+4
//   B (KSTEP x 8, by column):  b0 column g, word w; b1 column g, word w+4
//   C (16 x 8):                c0, c1 row g, columns 2t, 2t+1; c2, c3 row g+8
#include "gemm.h"

#define TM (WARPS_M * MI * 16)
#define TN (WARPS_N * NI * 8)
#define TK 32
#ifdef KUIPER_TF32
#define KSTEP 8        // k of one mma
#define PER_WORD 1     // elements of k in a 32-bit word
#define elem_t uint    // an element in local memory: TF32 bits (cvt.rna rounds float's mantissa to 10 bits)
#define raw_t float    // ... and in global memory
#define vec_t float4   // 16 bytes of it
#define VEC 4
inline uint to_elem(float v) {
    uint r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}
#define to_elems(v) ((uint4)(to_elem((v).x), to_elem((v).y), to_elem((v).z), to_elem((v).w)))
#define B_WORD(k, n) b_tile[(k) * ROW_B + (n)]
#define MMA_SHAPE "m16n8k8.row.col.f32.tf32.tf32.f32"
#else
#define KSTEP 16
#define PER_WORD 2
#define elem_t ushort  // half bits, copied as they are
#define raw_t ushort
#define vec_t uint4
#define VEC 8
#define to_elem(v) (v)
#define to_elems(v) (v)
// the word of halves (k, n) and (k + 1, n), k even: two rows of the B tile
#define B_WORD(k, n) ((uint)b_tile[(k) * ROW_B + (n)] | (uint)b_tile[((k) + 1) * ROW_B + (n)] << 16)
#define MMA_SHAPE "m16n8k16.row.col.f32.f16.f16.f32"
#endif
// words from one local row of A to the next; elements from one of B to the next (8 words more than 32 words'
// multiple, so that lanes 4 rows apart read 8 banks apart)
#define ROW (TK / PER_WORD + 4)
#define ROW_B (TN + 8)
#define THREADS (32 * WARPS_M * WARPS_N)
#define A_LOADS (TM * TK / THREADS)  // elements each work-item copies per step, one at a time
#define B_LOADS (TK * TN / THREADS)
#define A_VECS (A_LOADS / VEC)       // ... 16 bytes at a time
#define B_VECS (B_LOADS / VEC)
#if THREADS % TK || THREADS % TN || THREADS < TN || THREADS % (TN / VEC)
#error "the work-group must cover whole rows of the A tile and whole columns of the B tile"
#endif

#define MMA(d, a, b)                                                                                       \
    asm volatile("mma.sync.aligned." MMA_SHAPE " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"  \
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
inline raw_t im2col_at(const __global raw_t* b, int k, int K, int n, int N, int top, int left, int height,
                        int width, int dilation_h, int dilation_w) {
    if (k >= K || n >= N) return 0;
    const int c = k / (KH * KW), i = k / KW % KH, j = k % KW;
    const int y = top + i * dilation_h, x = left + j * dilation_w;
    return y >= 0 && y < height && x >= 0 && x < width ? b[((long)c * height + y) * width + x] : 0;
}
#endif

#ifdef VEC_A
// the 16 bytes of a row of A from k, past K zero: K need not be a multiple of VEC (a convolution's 3 x 7 x 7)
inline vec_t a_tail(const __global raw_t* row, int k, int K) {
    raw_t e[VEC];
    _Pragma("unroll")
    for (int i = 0; i < VEC; ++i) e[i] = k + i < K ? row[k + i] : 0;
#ifdef KUIPER_TF32
    return (vec_t)(e[0], e[1], e[2], e[3]);
#else
    return (vec_t)(e[0] | (uint)e[1] << 16, e[2] | (uint)e[3] << 16, e[4] | (uint)e[5] << 16, e[6] | (uint)e[7] << 16);
#endif
}
#endif

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void gemm_mma(__global store_t* restrict C, __global const store_t* restrict A, __global const store_t* restrict B,
              __global const store_t* restrict bias, const int bias_mode, EPILOGUE_ARGS, const int M, const int N,
              const int K, const int lda, const int ldb, const int ldc, STACK_ARGS IMAGE_ARGS) {
    // declared as 16-byte vectors, which the copies may store: a local array of ushort need only be 2-byte aligned
    __local uint4 a_vecs[TM * ROW / 4];
    __local uint4 b_vecs[TK * ROW_B / PER_WORD / 4];
    __local uint* a_words = (__local uint*)a_vecs;
    __local elem_t* a_tile = (__local elem_t*)a_vecs;
    __local elem_t* b_tile = (__local elem_t*)b_vecs;
    const int t = get_local_id(0), warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
    const int wm = warp / WARPS_N * MI * 16, wn = warp % WARPS_N * NI * 8;  // the warp's part of the tile
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN, z = get_global_id(2);
    const __global raw_t* a = (const __global raw_t*)(A + stack_offset(z, groups, off_a, group_a, item_a));
    const __global raw_t* b = (const __global raw_t*)(B + stack_offset(z, groups, off_b, group_b, item_b));
    C += stack_offset(z, groups, off_c, group_c, item_c);
    residual += stack_offset(z, groups, off_c, group_c, item_c);

    // the copies: A by rows of k, B by rows of n. An element at a time, work-item t takes k = t % TK of A's rows
    // t / TK + e * THREADS / TK, and n = n0 + t % TN of B's rows t / TN + e * THREADS / TN; 16 bytes at a time,
    // the VEC elements from k = t % (TK / VEC) * VEC of rows t / (TK / VEC) + e * THREADS / (TK / VEC), and from
    // n = n0 + t % (TN / VEC) * VEC of rows t / (TN / VEC) + e * THREADS / (TN / VEC)
#ifdef VEC_A
#define A_ROWS (THREADS * VEC / TK)  // rows one pass of the work-group copies
    const int ak = t % (TK / VEC) * VEC, ar = t / (TK / VEC);
    vec_t next_a[A_VECS];
#define FETCH_A(k0)                                                                                        \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < A_VECS; ++e) {                                                                     \
        const int m = m0 + ar + e * A_ROWS, k = (k0) + ak;                                                  \
        next_a[e] = m < M && k + VEC <= K ? *(const __global vec_t*)(a + (long)m * lda + k)                \
                  : m < M && k < K ? a_tail(a + (long)m * lda, k, K) : (vec_t)0;                           \
    }
#define STORE_A()                                                                                          \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < A_VECS; ++e)                                                                       \
        *(__local uint4*)(a_tile + (ar + e * A_ROWS) * ROW * PER_WORD + ak) = to_elems(next_a[e]);
#else
#define A_ROWS (THREADS / TK)
    const int ak = t % TK, ar = t / TK;
    raw_t next_a[A_LOADS];
#define FETCH_A(k0)                                                                                        \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < A_LOADS; ++e) {                                                                    \
        const int m = m0 + ar + e * A_ROWS, k = (k0) + ak;                                                  \
        next_a[e] = m < M && k < K ? a[(long)m * lda + k] : 0;                                             \
    }
#define STORE_A()                                                                                          \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < A_LOADS; ++e) a_tile[(ar + e * A_ROWS) * ROW * PER_WORD + ak] = to_elem(next_a[e]);
#endif
#ifdef VEC_B
#define B_ROWS (THREADS * VEC / TN)
    const int bn = t % (TN / VEC) * VEC, bk = t / (TN / VEC), n = n0 + bn;
    vec_t next_b[B_VECS];
#define FETCH_B(k0)                                                                                        \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < B_VECS; ++e) {                                                                     \
        const int k = (k0) + bk + e * B_ROWS;                                                              \
        next_b[e] = k < K && n < N ? *(const __global vec_t*)(b + (long)k * ldb + n) : (vec_t)0;          \
    }
#define STORE_B()                                                                                          \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < B_VECS; ++e) *(__local uint4*)(b_tile + (bk + e * B_ROWS) * ROW_B + bn) = to_elems(next_b[e]);
#else
#define B_ROWS (THREADS / TN)
    const int bn = t % TN, bk = t / TN, n = n0 + bn;
    raw_t next_b[B_LOADS];
#ifdef KH
    const int top = n / out_w * stride_h - pad_h, left = n % out_w * stride_w - pad_w;
#define b_at(k) im2col_at(b, k, K, n, N, top, left, height, width, dilation_h, dilation_w)
#else
#define b_at(k) ((k) < K && n < N ? b[(long)(k) * ldb + n] : 0)
#endif
#define FETCH_B(k0)                                                                                        \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < B_LOADS; ++e) next_b[e] = b_at((k0) + bk + e * B_ROWS);
#define STORE_B()                                                                                          \
    _Pragma("unroll")                                                                                      \
    for (int e = 0; e < B_LOADS; ++e) b_tile[(bk + e * B_ROWS) * ROW_B + bn] = to_elem(next_b[e]);
#endif

    float acc[MI][NI][4];
    _Pragma("unroll")
    for (int i = 0; i < MI; ++i) {
        _Pragma("unroll")
        for (int j = 0; j < NI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    }
    FETCH_A(0)
    FETCH_B(0)
    for (int k0 = 0; k0 < K; k0 += TK) {
        STORE_A()
        STORE_B()
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < K) {  // in flight while the tensor cores work on this step
            FETCH_A(k0 + TK)
            FETCH_B(k0 + TK)
        }
        _Pragma("unroll")
        for (int ks = 0; ks < TK; ks += KSTEP) {
            uint fa[MI][4], fb[NI][2];
            _Pragma("unroll")
            for (int i = 0; i < MI; ++i) {
                const int row = (wm + i * 16 + g) * ROW + ks / PER_WORD + q;
                fa[i][0] = a_words[row];
                fa[i][1] = a_words[row + 8 * ROW];
                fa[i][2] = a_words[row + 4];
                fa[i][3] = a_words[row + 8 * ROW + 4];
            }
            _Pragma("unroll")
            for (int j = 0; j < NI; ++j) {
                const int column = wn + j * 8 + g, k = ks + q * PER_WORD;
                fb[j][0] = B_WORD(k, column);
                fb[j][1] = B_WORD(k + KSTEP / 2, column);
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
