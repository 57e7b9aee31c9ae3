// A softmax over a row shared by a work-group (softmax_rows in softmax.cl, attention_softmax in attention.cl):
// the row's maximum m, then y_j = exp(x_j - m) / sum_k exp(x_k - m).
#ifndef KUIPER_GROUP_SOFTMAX_H
#define KUIPER_GROUP_SOFTMAX_H

#include "activations.h"  // exp_fit, exp_fit8
#include "group_reduce.h"
#include "store.h"

// The maximum of row elements start .. start + length - 1 of x, the group striding through them. A comparison,
// not fmax (a call on PoCL), skips NaN as fmax does: a NaN in the row makes its softmax NaN all the same.
float group_row_max(__global const store_t* x, const long start, const int length, __local float* scratch) {
    const int lid = ROW_LID;
    const int size = ROW_SIZE;
    float m = -INFINITY;
    int j = lid;
    if (size == 1) {  // a CPU core with the row alone: eight elements a step
        float8 m8 = (float8)(-INFINITY);
        for (; j + 8 <= length; j += 8) {
            const float8 v = LOAD8(x, start + j);
            m8 = v > m8 ? v : m8;
        }
        const float4 m4 = m8.lo > m8.hi ? m8.lo : m8.hi;
        const float2 m2 = m4.lo > m4.hi ? m4.lo : m4.hi;
        m = m2.x > m2.y ? m2.x : m2.y;
    }
    for (; j < length; j += size) {
        const float v = LOAD(x, start + j);
        m = v > m ? v : m;
    }
    return group_reduce(m, scratch, true);
}

// Row elements start .. start + length - 1 of x, the group striding through them; y may be x (in place). A
// row of -inf alone (m = -inf) has no maximum to subtract: exp(-inf) = 0 everywhere, so its sum is 0 and it
// gives 0 / 0 = NaN, as numpy does, or zeros with zero_empty (PyTorch's scaled_dot_product_attention).
// On CPUs a work-item takes a row alone (a group of one) and walks it eight elements a step, with eight
// running sums, several times faster than a row a work-item one element a step (docs/tuning.md).
void group_softmax(__global store_t* y, __global const store_t* x, const long start, const int length,
                   const float m, const bool zero_empty, __local float* scratch) {
    const int lid = ROW_LID;
    const int size = ROW_SIZE;
    const float shift = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f;
    int j = lid;
    if (size == 1) {
        float8 sums = 0.0f;
        for (; j + 8 <= length; j += 8) {
            const float8 e = exp_fit8(LOAD8(x, start + j) - shift);
            STORE8(y, start + j, e);
            sums += e;
        }
        const float4 s4 = sums.lo + sums.hi;
        sum = (s4.x + s4.y) + (s4.z + s4.w);
    }
    for (; j < length; j += size) {
        const float e = exp_fit(LOAD(x, start + j) - shift);
        STORE(y, start + j, e);
        sum += e;
    }
    sum = group_reduce(sum, scratch, false);
    const float divisor = sum == 0.0f && zero_empty ? INFINITY : sum;  // 0 / inf = 0
    j = lid;  // each work-item rereads only what it wrote itself
    if (size == 1) {
        for (; j + 8 <= length; j += 8) {
            STORE8(y, start + j, LOAD8(y, start + j) / divisor);
        }
    }
    for (; j < length; j += size) {
        STORE(y, start + j, LOAD(y, start + j) / divisor);
    }
}

#endif
