// What cl/gemm.cl and cl/gemm_mma.cl share: the stack of products, the bias, and implicit im2col's
// arguments (with -DKH and -DKW: the geometry of the convolution whose column matrix B stands for).
#ifndef KUIPER_GEMM_H
#define KUIPER_GEMM_H

#include "epilogue.h"

// The offset of product z's matrix, in elements (long: a batch of activations can pass 2^31 elements).
inline long stack_offset(int z, int groups, long offset, long group_stride, long item_stride) {
    return offset + (long)(z % groups) * group_stride + (long)(z / groups) * item_stride;
}

inline float bias_of(__global const store_t* bias, int bias_mode, int g, int m, int n, int M, int N) {
    return bias_mode == 1 ? LOAD(bias, g * M + m) : bias_mode == 2 ? LOAD(bias, g * N + n) : 0.0f;
}

#define STACK_ARGS                                                                                         \
    const int groups, const long off_a, const long off_b, const long off_c, const long group_a,           \
    const long group_b, const long group_c, const long item_a, const long item_b, const long item_c

// With -DSPLIT (split-K) a kernel sums one slice of K and writes its partial sums to `partial`, for gemm_sum
#ifdef SPLIT
#define SPLIT_ARGS , const int slices, const int span, __global float* restrict partial
#else
#define SPLIT_ARGS
#endif

// In a kernel with these arguments: z, the product of the stack global dimension 2 names; k_begin and k_end, the
// part of K it sums (its slice under -DSPLIT); and A, B, C and residual moved to product z's matrices
#ifdef SPLIT
#define SELECT_PRODUCT_SLICE                                                                               \
    const int z = get_global_id(2) / slices, slice = get_global_id(2) % slices;                             \
    const int k_begin = slice * span, k_end = min(K, k_begin + span)
#else
#define SELECT_PRODUCT_SLICE const int z = get_global_id(2), k_begin = 0, k_end = K
#endif
#define SELECT_PRODUCT                                                                                     \
    SELECT_PRODUCT_SLICE;                                                                                  \
    A += stack_offset(z, groups, off_a, group_a, item_a);                                                  \
    B += stack_offset(z, groups, off_b, group_b, item_b);                                                  \
    C += stack_offset(z, groups, off_c, group_c, item_c);                                                  \
    residual += stack_offset(z, groups, off_c, group_c, item_c)

#ifdef KH
#define IMAGE_ARGS , const int height, const int width, const int out_w, const int stride_h, const int stride_w, \
    const int pad_h, const int pad_w, const int dilation_h, const int dilation_w
#else
#define IMAGE_ARGS
#endif

#endif
