// Element-wise activations: one kernel, the formula (cl/activations.h) picked at compile time with
// -DACT=act_<name>. With -DEXACT (CPUs) the host launches exactly n work-items (Enqueuer.run_exact): without
// the bounds check PoCL runs the kernel as vectors.
#include "activations.h"
#include "store.h"

__kernel void activation(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                         const float a, const float b) {
    const int i = get_global_id(0);
#ifndef EXACT
    if (i >= n) return;
#endif
    STORE(y, i, ACT(LOAD(x, i), a, b));
}
