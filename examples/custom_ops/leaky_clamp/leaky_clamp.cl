// The leaky clamp of leaky_clamp.toml. LO and HI are #defines made from the operator's min_val and max_val;
// OUTPUT0_SIZE is one of the defines kuiper adds for every tensor. Tensors are store_t, read and written
// through LOAD and STORE (store.h), so that the kernel runs with precision fp16 too.
#include "store.h"

__kernel void leaky_clamp(__global store_t* restrict y, __global const store_t* restrict x, const float slope) {
    const int i = get_global_id(0);
    if (i < OUTPUT0_SIZE) {
        const float v = LOAD(x, i);
        const float clamped = v < LO ? LO : (v > HI ? HI : v);  // comparisons let NaN through, as PyTorch does
        // with slope 0, skip the product: 0 * (inf - HI) would be NaN where Hardtanh gives HI
        STORE(y, i, slope == 0.0f ? clamped : clamped + slope * (v - clamped));
    }
}
