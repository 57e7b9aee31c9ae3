// Softmax along one dim of an input viewed as (outer, length, inner): element (o, j, k) sits at
// (o * length + j) * inner + k. Both kernels compute numpy's formula, in its order: m = max over the
// line, e_j = exp(x_j - m) written to y, then y_j = e_j / sum(e).

#include "activations.h"
#include "group_reduce.h"
#include "lanes.h"
#include "group_softmax.h"
#include "store.h"

// One work-item per line (o, k), walking it three times. Consecutive work-items take consecutive k, so
// their loads are unit-stride whenever inner > 1; with inner == 1 each walks its own row, which suits a
// CPU core. n = outer * inner.
__kernel void softmax_lines(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                            const int length, const int inner) {
    const int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    const int o = i / inner;
    const int start = o * length * inner + (i - o * inner);
    float m = -INFINITY;
    for (int j = 0; j < length; ++j) {
        m = fmax(m, LOAD(x, start + j * inner));
    }
    float sum = 0.0f;
    for (int j = 0; j < length; ++j) {
        const float e = exp_fit(LOAD(x, start + j * inner) - m);
        STORE(y, start + j * inner, e);
        sum += e;
    }
    for (int j = 0; j < length; ++j) {
        STORE(y, start + j * inner, LOAD(y, start + j * inner) / sum);
    }
}

// One work-group per contiguous row (inner == 1) on GPUs: the group strides through the row together, so its
// loads are unit-stride, and combines its partial max and sum in local memory. The global size is rows * local
// size exactly: every group has a row. On CPUs (ROW_EACH) a work-item per row.
__kernel OWN_LANES void softmax_rows(__global store_t* restrict y, __global const store_t* restrict x, const int length,
                           __local float* scratch) {
    const int start = ROW_ID * length;
    group_softmax(y, x, start, length, group_row_max(x, start, length, scratch), false, scratch);
}
