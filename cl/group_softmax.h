// The end of a softmax over a row shared by a work-group (softmax_rows in softmax.cl, attention_softmax in
// attention.cl), once the group knows the row's maximum m: y_j = exp(x_j - m) / sum_k exp(x_k - m). Include
// group_reduce.h and store.h beside it: each kernel file names every header it uses, since the program cache
// hashes the headers a file includes, not theirs.

#include "store.h"  // for store_t here, whichever order the kernel file names its headers in

// Row elements start .. start + length - 1 of x, the group striding through them; y may be x (in place). A
// row of -inf alone (m = -inf) has no maximum to subtract: exp(-inf) = 0 everywhere, so its sum is 0 and it
// gives 0 / 0 = NaN, as numpy does, or zeros with zero_empty (PyTorch's scaled_dot_product_attention).
void group_softmax(__global store_t* y, __global const store_t* x, const long start, const int length,
                   const float m, const bool zero_empty, __local float* scratch) {
    const int lid = get_local_id(0);
    const int size = get_local_size(0);
    const float shift = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f;
    for (int j = lid; j < length; j += size) {
        const float e = exp(LOAD(x, start + j) - shift);
        STORE(y, start + j, e);
        sum += e;
    }
    sum = group_reduce(sum, scratch, false);
    const float divisor = sum == 0.0f && zero_empty ? INFINITY : sum;  // 0 / inf = 0
    for (int j = lid; j < length; j += size) {
        STORE(y, start + j, LOAD(y, start + j) / divisor);  // each work-item rereads only what it wrote itself
    }
}
