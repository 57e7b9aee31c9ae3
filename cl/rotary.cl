// Rotary position embedding (kuiper/opencl/rotary.py): x (rows, tokens, dim), rows = B x H, each head's two
// halves turned pair by pair, pair i of token s by angle positions[s] * inv_freq[i]:
//
//   out[.., s, i]         = x1 cos - x2 sin        x1 = x[.., s, i], x2 = x[.., s, i + pairs]
//   out[.., s, i + pairs] = x2 cos + x1 sin        pairs = dim / 2
//
// The angle in float32 alone would be wrong at long contexts: at position 100000 and inv_freq 1 it is about
// 1e5 radians, whose nearest float is up to 0.004 away, and cos and sin inherit that. Only the angle modulo a
// whole turn matters, so the host gives each frequency in turns per position, t = inv_freq / 2 pi, as a pair
// of floats hi + lo (t to about 48 bits), and the kernel works out p * t modulo 1 exactly enough:
//   p * hi = whole + err exactly (fma gives err, the rounding of the product), p exact below 2^24;
//   whole - rint(whole) is exact (a float near an integer minus that integer);
//   the fraction of a turn is that plus err + p * lo, below 1 in size, good to float precision.
// The fraction then gives sin and cos within about 1e-6 of the reference's float64 ones at any position
// (turn_sincos): in turns, the quarter turns come off exactly, and short polynomials do the rest.

#include "store.h"
#ifdef NORMED
#include "group_reduce.h"
#endif

#ifndef INDEX
#define INDEX long  // the positions' integer type (kuiper/opencl/indices.py)
#endif

// (sin, cos) of t turns, |t| below 1: the nearest quarter turn k / 4 comes off exactly (t and k / 4 are
// within a factor of two, or k is 0), leaving r = 2 pi (t - k / 4) in [-pi/4, pi/4], where the Taylor polynomials
// of degree 9 and 10 are good to float precision (the next terms are below 2e-9); the quarter turns then swap
// and negate sin and cos. k & 3 is k modulo 4 for negative k too (two's complement).
inline float2 turn_sincos(const float t) {
    const float k = rint(4.0f * t);
    const float r = (t - 0.25f * k) * 6.28318530717958647692f;
    const float r2 = r * r;
    const float s = r * (1.0f + r2 * (-1.0f / 6 + r2 * (1.0f / 120 + r2 * (-1.0f / 5040 + r2 * (1.0f / 362880)))));
    const float c = 1.0f + r2 * (-0.5f + r2 * (1.0f / 24 + r2 * (-1.0f / 720 + r2 * (1.0f / 40320 +
                    r2 * (-1.0f / 3628800)))));
    const int quarter = (int)k & 3;
    return quarter == 0 ? (float2)(s, c) : quarter == 1 ? (float2)(c, -s) : quarter == 2 ? (float2)(-s, -c)
                                                                                             : (float2)(-c, s);
}

// (sin, cos) of pair i's angle at position p: p * (hi + lo) turns, the whole turns taken off as above
inline float2 pair_sincos(const float p, __global const uint* restrict turns, const int i) {
    const float hi = as_float(turns[2 * i]), lo = as_float(turns[2 * i + 1]);
    const float whole = p * hi;
    const float err = fma(p, hi, -whole);
    return turn_sincos((whole - rint(whole)) + (err + p * lo));
}

// One work-item per pair and token, launched exactly (pairs, tokens): the cos and sin are computed once and turn
// the pair in every row. The turns are uploaded as bits (uint), so that fp16 storage does not round them to half.
__kernel void rotary(__global store_t* restrict out, __global const store_t* restrict x,
                     __global const INDEX* restrict positions, __global const uint* restrict turns,
                     const int rows, const int tokens, const int pairs) {
    const int i = get_global_id(0);
    const int s = get_global_id(1);
    const float2 turned = pair_sincos((float)positions[s], turns, i);
    const float sn = turned.x, c = turned.y;
    const long step = (long)tokens * 2 * pairs;  // from one row to the next
    long at = (long)s * 2 * pairs + i;
    for (int r = 0; r < rows; ++r, at += step) {
        const float x1 = LOAD(x, at), x2 = LOAD(x, at + pairs);
        STORE(out, at, x1 * c - x2 * sn);
        STORE(out, at + pairs, x2 * c + x1 * sn);
    }
}

// Pair i of token s of every head of one piece (kuiper/opencl/heads.py): read from the piece's columns of x, a row
// of `width` columns a token, starting at column `first`, written to out (batch, heads, tokens, 2 * pairs), turned
// by `turned` (sin, cos) where `turn` is set, copied where not. Built with -DNORMED=pairs, a work-group holds one
// token's pairs, and a piece whose RMSNorm weights start at `scale_at` of `table` (-1: none) has each head divided by
// the root mean square of its coordinates, summed over the group, and times the weights, before it turns; the angle
// is then worked out after the group's barriers, at position p: Intel's CPU compiler lost the one kept across them.
inline void cut_heads(__global store_t* restrict out, __global const store_t* restrict x, const int batch,
                      const int tokens, const int width, const int pairs, const int i, const int s, const int first,
                      const int heads, const int turn, float2 turned, const float p,
                      __global const uint* restrict table, const int scale_at, const float eps,
                      __local float* reduce) {
    for (int b = 0; b < batch; ++b) {
        const long row = ((long)b * tokens + s) * width + first + i;
        for (int h = 0; h < heads; ++h) {
            const long from = row + (long)h * 2 * pairs;
            const long to = (((long)b * heads + h) * tokens + s) * 2 * pairs + i;
            float x1 = LOAD(x, from), x2 = LOAD(x, from + pairs);
#ifdef NORMED
            if (scale_at >= 0) {  // the same for the whole group, so that all of it meets the barriers
                const float r = rsqrt(group_reduce(x1 * x1 + x2 * x2, reduce, false) / (2 * pairs) + eps);
                x1 *= r * as_float(table[scale_at + i]);
                x2 *= r * as_float(table[scale_at + i + pairs]);
            }
            if (turn) {
                turned = pair_sincos(p, table, i);
            }
#endif
            const float sn = turned.x, c = turned.y;
            STORE(out, to, turn ? x1 * c - x2 * sn : x1);
            STORE(out, to + pairs, turn ? x2 * c + x1 * sn : x2);
        }
    }
}

// Up to three pieces of x (batch, tokens, width) cut into heads in one launch, (pairs, tokens) as rotary: the
// angle is worked out once where any piece turns (positions then given), and serves every head of each. `table`
// holds the turns, then the weights of each piece's RMSNorm (at its scale_at).
__kernel void split_heads(__global const store_t* restrict x, __global const INDEX* restrict positions,
                          __global const uint* restrict table, const int batch, const int tokens, const int width,
                          const int pairs, const float eps,
                          __global store_t* restrict out0, const int first0, const int heads0, const int turn0,
                          const int scale_at0,
                          __global store_t* restrict out1, const int first1, const int heads1, const int turn1,
                          const int scale_at1,
                          __global store_t* restrict out2, const int first2, const int heads2, const int turn2,
                          const int scale_at2) {
    const int i = get_global_id(0);
    const int s = get_global_id(1);
    const int turn = turn0 | turn1 | turn2;
    const float p = turn ? (float)positions[s] : 0.0f;
#ifdef NORMED
    __local float reduce[NORMED];
    const float2 turned = (float2)(0.0f, 1.0f);  // each head's angle is worked out in cut_heads
#else
    __local float* reduce = 0;  // never read: no piece is normed
    const float2 turned = turn ? pair_sincos(p, table, i) : (float2)(0.0f, 1.0f);
#endif
    cut_heads(out0, x, batch, tokens, width, pairs, i, s, first0, heads0, turn0, turned, p, table, scale_at0, eps,
              reduce);
    cut_heads(out1, x, batch, tokens, width, pairs, i, s, first1, heads1, turn1, turned, p, table, scale_at1, eps,
              reduce);
    cut_heads(out2, x, batch, tokens, width, pairs, i, s, first2, heads2, turn2, turned, p, table, scale_at2, eps,
              reduce);
}
