// Between the host's float32 and the device's storage (cl/store.h) for precision="fp16": a graph's inputs are
// uploaded as float32 and stored here, its outputs widened here and downloaded as float32. numpy's own
// float32 -> float16 conversion costs far more than the upload it would save, and the device does it almost
// for free.
#include "store.h"

__kernel void to_storage(__global store_t* restrict y, __global const float* restrict x, const long n) {
    const long i = get_global_id(0);
    if (i < n) STORE(y, i, x[i]);
}

__kernel void from_storage(__global float* restrict y, __global const store_t* restrict x, const long n) {
    const long i = get_global_id(0);
    if (i < n) y[i] = LOAD(x, i);
}
