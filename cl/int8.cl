// Int8Linear (kuiper/opencl/int8_linear.py): y = x @ (q * scale)^T + bias, with int8 weights q (out, in) and one
// scale per group of GROUP consecutive inputs of a row (the last group of a row may be shorter).
//
// A work-item computes ROWS output features for TOKENS rows of x: it walks its rows of q once, eight int8 values
// at a time, widens them to float in registers, and multiplies each into all its TOKENS rows of x, so that a
// weight is widened once per TOKENS tokens and an element of x loaded once per ROWS features. Decoding one token
// (ROWS = TOKENS = 1) is a stream over q, a byte per weight. The host launches whole blocks of TOKENS rows, then
// the rows left over one at a time (TOKENS = 1, from `first`): the loop has no bounds check inside. Output
// features past out_features read the last row again and store nothing.
//
// float8, not float16: PoCL returns a float16 from vload16 and convert_float16 through calls whose ABI differs
// from the kernel's where it targets no AVX-512.

#include "store.h"
#include "lanes.h"

#ifdef KUIPER_HALF
#define LOADX8(p, i) vload_half8(0, (p) + (i))
#else
#define LOADX8(p, i) vload8(0, (p) + (i))
#endif

__kernel OWN_LANES void int8_linear(__global store_t* restrict y, __global const store_t* restrict x,
                                    __global const char* restrict q, __global const store_t* restrict scales,
                                    __global const store_t* restrict bias, const int has_bias, const int first,
                                    const int in_features, const int out_features, const int groups) {
    const int n0 = get_global_id(0) * ROWS;
    const int m0 = first + get_global_id(1) * TOKENS;
    long row[ROWS];     // where each of its rows of q begins
    long scale[ROWS];   // ... and its scales
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long n = min(n0 + r, out_features - 1);
        row[r] = n * in_features;
        scale[r] = n * groups;
    }
    float8 acc[ROWS][TOKENS];
    float rest[ROWS][TOKENS];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        #pragma unroll
        for (int t = 0; t < TOKENS; ++t) {
            acc[r][t] = (float8)(0.0f);
            rest[r][t] = 0.0f;
        }
    }
    const int whole = in_features / GROUP;  // groups of GROUP; a shorter one may follow
    for (int g = 0; g < whole; ++g) {
        const int begin = g * GROUP;
        float8 part[ROWS][TOKENS];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            #pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                part[r][t] = (float8)(0.0f);
            }
        }
        #pragma unroll
        for (int c = 0; c < GROUP; c += 8) {
            float8 xs[TOKENS];
            #pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                xs[t] = LOADX8(x, (long)(m0 + t) * in_features + begin + c);
            }
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float8 w = convert_float8(vload8(0, q + row[r] + begin + c));
                #pragma unroll
                for (int t = 0; t < TOKENS; ++t) {
                    part[r][t] += xs[t] * w;
                }
            }
        }
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const float s = LOAD(scales, scale[r] + g);
            #pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                acc[r][t] += part[r][t] * s;
            }
        }
    }
    if (whole < groups) {  // the last group, shorter than GROUP
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const float s = LOAD(scales, scale[r] + whole);
            for (int j = whole * GROUP; j < in_features; ++j) {
                const float w = (float)q[row[r] + j] * s;
                #pragma unroll
                for (int t = 0; t < TOKENS; ++t) {
                    rest[r][t] += LOAD(x, (long)(m0 + t) * in_features + j) * w;
                }
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int n = n0 + r;
        if (n < out_features) {
            const float b = has_bias ? LOAD(bias, n) : 0.0f;
            #pragma unroll
            for (int t = 0; t < TOKENS; ++t) {
                const float4 f = acc[r][t].lo + acc[r][t].hi;
                const float2 d = f.lo + f.hi;
                STORE(y, (long)(m0 + t) * out_features + n, (d.x + d.y) + rest[r][t] + b);
            }
        }
    }
}
