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
//   the fraction of a turn is that plus err + p * lo, a number below one in size, good to float precision.
// cos and sin then see an angle within about 1e-6 rad of the reference's float64 one at any position.

#include "store.h"

#ifndef INDEX
#define INDEX long  // the positions' integer type (kuiper/opencl/indices.py)
#endif

// One work-item per pair and token: the cos and sin are computed once and turn the pair in every row.
// The turns are uploaded as bits (uint), so that fp16 storage does not round them to half.
__kernel void rotary(__global store_t* restrict out, __global const store_t* restrict x,
                     __global const INDEX* restrict positions, __global const uint* restrict turns,
                     const int rows, const int tokens, const int pairs) {
    const int i = get_global_id(0);
    const int s = get_global_id(1);
    if (i >= pairs || s >= tokens) {
        return;
    }
    const float p = (float)positions[s];
    const float hi = as_float(turns[2 * i]), lo = as_float(turns[2 * i + 1]);
    const float whole = p * hi;
    const float err = fma(p, hi, -whole);
    const float fraction = (whole - rint(whole)) + (err + p * lo);
    const float angle = fraction * 6.28318530717958647692f;
    const float c = cos(angle), sn = sin(angle);
    const long step = (long)tokens * 2 * pairs;  // from one row to the next
    long at = (long)s * 2 * pairs + i;
    for (int r = 0; r < rows; ++r, at += step) {
        const float x1 = LOAD(x, at), x2 = LOAD(x, at + pairs);
        STORE(out, at, x1 * c - x2 * sn);
        STORE(out, at + pairs, x2 * c + x1 * sn);
    }
}
