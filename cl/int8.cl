// Int8Linear (kuiper/opencl/int8_linear.py): y = x @ (q * scale)^T + bias, with int8 weights q (out, in) and one
// scale per group of `group` consecutive inputs of a row (the last group of a row may be shorter).
//
// One work-item per output feature n and block of up to TOKENS rows of x: it walks row n of q once, eight int8
// values at a time, widens them to float and applies the group's scale in registers, and multiplies them into
// every one of its rows of x. Decoding one token is then a stream over q, a byte per weight. Vectors are built
// from scalar loads (as store.h's LOAD8), which the compilers merge into vector loads: PoCL's vload16 and
// convert_float16 return float16 through a call whose ABI differs from the kernel's on AVX-512 targets.

#include "store.h"
#include "lanes.h"

#ifndef TOKENS
#define TOKENS 4
#endif

// eight int8 weights from element i, widened to float
#define WEIGHT8(p, i) (float8)((p)[(i)], (p)[(i) + 1], (p)[(i) + 2], (p)[(i) + 3], (p)[(i) + 4], (p)[(i) + 5], \
                               (p)[(i) + 6], (p)[(i) + 7])

__kernel OWN_LANES void int8_linear(__global store_t* restrict y, __global const store_t* restrict x,
                                    __global const char* restrict q, __global const store_t* restrict scales,
                                    __global const store_t* restrict bias, const int has_bias, const int tokens,
                                    const int in_features, const int out_features, const int group,
                                    const int groups) {
    const int n = get_global_id(0);
    const int first = get_global_id(1) * TOKENS;
    if (n >= out_features || first >= tokens) {
        return;
    }
    const int rows = min(TOKENS, tokens - first);
    const long row = (long)n * in_features;
    float8 acc[TOKENS];
    float rest[TOKENS];
    #pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
        acc[t] = (float8)(0.0f);
        rest[t] = 0.0f;
    }
    for (int g = 0; g < groups; ++g) {
        const float s = LOAD(scales, (long)n * groups + g);
        const int begin = g * group;
        const int end = min(begin + group, in_features);
        int k = begin;
        for (; k + 8 <= end; k += 8) {
            const float8 w = WEIGHT8(q, row + k) * s;
            #pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                if (t < rows) {
                    acc[t] += LOAD8(x, (long)(first + t) * in_features + k) * w;
                }
            }
        }
        for (; k < end; ++k) {  // a group's ragged end
            const float w = (float)q[row + k] * s;
            for (int t = 0; t < rows; ++t) {
                rest[t] += LOAD(x, (long)(first + t) * in_features + k) * w;
            }
        }
    }
    const float b = has_bias ? LOAD(bias, n) : 0.0f;
    for (int t = 0; t < rows; ++t) {
        const float8 h = acc[t];
        const float4 f = h.lo + h.hi;
        const float2 d = f.lo + f.hi;
        STORE(y, (long)(first + t) * out_features + n, (d.x + d.y) + rest[t] + b);
    }
}
