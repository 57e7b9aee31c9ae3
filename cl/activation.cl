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

// A gated linear unit's last step where the GEMM does not take it (kuiper/opencl/gated.py): row r of `both`
// holds `width` values of a gate, then `width` of an up projection, and out's row r becomes silu(gate) * up.
__kernel void gate_times_up(__global store_t* restrict out, __global const store_t* restrict both, const int width,
                            const int rows) {
    const int j = get_global_id(0), r = get_global_id(1);
    if (j >= width || r >= rows) return;
    const long at = (long)r * 2 * width + j;
    STORE(out, (long)r * width + j, act_silu(LOAD(both, at), 0.0f, 0.0f) * LOAD(both, at + width));
}
