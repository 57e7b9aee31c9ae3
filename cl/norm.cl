// LayerNorm and GroupNorm (kuiper/opencl/layer_norm.py): the input seen as rows of `length` contiguous
// elements, each row normalised by its own mean and biased variance, then an optional weight and bias.
// RMSNorm (kuiper/opencl/rms_norm.py): the same rows divided by their root mean square, then a weight.
//
// Element j of row r takes weight and bias index ((r % groups) * length + j) / inner: for LayerNorm
// (groups = inner = 1) that is j, one value per normalised element; for GroupNorm, whose row is one group
// of channels of one sample, it is the element's channel (inner = pixels per channel).

#include "store.h"
#include "lanes.h"
#include "group_reduce.h"

// this work-item's share of a row's sum of x - shift (squared when `squares`): the elements lid, lid + size, ...
// of the row that starts at `start`, in eight running sums: one sum would wait on each addition's latency where
// a work-item takes a row alone (CPUs)
inline float partial_sum(__global const store_t* x, long start, int length, int lid, int size, float shift,
                         bool squares) {
    float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int j = lid;
    for (; j + 7 * size < length; j += 8 * size) {
        #pragma unroll
        for (int u = 0; u < 8; ++u) {
            const float d = LOAD(x, start + j + u * size) - shift;
            s[u] += squares ? d * d : d;
        }
    }
    for (; j < length; j += size) {
        const float d = LOAD(x, start + j) - shift;
        s[0] += squares ? d * d : d;
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// One work-group per row: the group strides through the row together (unit-stride loads), and combines its
// partial sums in local memory. Two passes compute the variance around the mean, as numpy and PyTorch do:
// the one-pass formula E[x^2] - E[x]^2 loses every digit when the mean is large against the spread.
__kernel OWN_LANES void norm_rows(__global store_t* restrict y, __global const store_t* restrict x,
                        __global const store_t* restrict weight, __global const store_t* restrict bias,
                        const int has_weight, const int has_bias, const int length, const int groups,
                        const int inner, const float eps, __local float* scratch) {
    const int lid = ROW_LID;
    const int size = ROW_SIZE;
    const int row = ROW_ID;
    const long start = (long)row * length;
    const float mean = group_reduce(partial_sum(x, start, length, lid, size, 0.0f, false), scratch, false) / length;
    const float squares = partial_sum(x, start, length, lid, size, mean, true);
    const float scale = 1.0f / sqrt(group_reduce(squares, scratch, false) / length + eps);
    const int first = (row % groups) * length;
    for (int j = lid; j < length; j += size) {
        const int c = inner == 1 ? first + j : (first + j) / inner;  // LayerNorm: no division per element
        float v = (LOAD(x, start + j) - mean) * scale;
        if (has_weight) v *= LOAD(weight, c);
        if (has_bias) v += LOAD(bias, c);
        STORE(y, start + j, v);
    }
}

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, one work-group per row as norm_rows, with one pass over the
// row instead of two (no mean to subtract). The weight runs along the row (index j).
__kernel OWN_LANES void rms_rows(__global store_t* restrict y, __global const store_t* restrict x,
                                 __global const store_t* restrict weight, const int has_weight, const int length,
                                 const float eps, __local float* scratch) {
    const int lid = ROW_LID;
    const int size = ROW_SIZE;
    const long start = (long)ROW_ID * length;
    const float squares = group_reduce(partial_sum(x, start, length, lid, size, 0.0f, true), scratch, false);
    const float scale = 1.0f / sqrt(squares / length + eps);
    for (int j = lid; j < length; j += size) {
        float v = LOAD(x, start + j) * scale;
        if (has_weight) v *= LOAD(weight, j);
        STORE(y, start + j, v);
    }
}
