// LayerNorm and GroupNorm (kuiper/layers/layer_norm.py): the input seen as rows of `length` contiguous
// elements, each row normalised by its own mean and biased variance, then an optional weight and bias.
//
// Element j of row r takes weight and bias index ((r % groups) * length + j) / inner: for LayerNorm
// (groups = inner = 1) that is j, one value per normalised element; for GroupNorm, whose row is one group
// of channels of one sample, it is the element's channel (inner = pixels per channel).

#include "store.h"
#include "group_reduce.h"

// One work-group per row: the group strides through the row together (unit-stride loads), and combines its
// partial sums in local memory. Two passes compute the variance around the mean, as numpy and PyTorch do:
// the one-pass formula E[x^2] - E[x]^2 loses every digit when the mean is large against the spread.
__kernel void norm_rows(__global store_t* restrict y, __global const store_t* restrict x,
                        __global const store_t* restrict weight, __global const store_t* restrict bias,
                        const int has_weight, const int has_bias, const int length, const int groups,
                        const int inner, const float eps, __local float* scratch) {
    const int lid = get_local_id(0);
    const int size = get_local_size(0);
    const int row = get_group_id(0);
    const long start = (long)row * length;
    float sum = 0.0f;
    for (int j = lid; j < length; j += size) {
        sum += LOAD(x, start + j);
    }
    const float mean = group_reduce(sum, scratch, false) / length;
    float squares = 0.0f;
    for (int j = lid; j < length; j += size) {
        const float d = LOAD(x, start + j) - mean;
        squares += d * d;
    }
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
