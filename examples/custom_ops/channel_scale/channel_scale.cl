// The channel scale of channel_scale.toml, over a 3-D range (W, H, N*C): no index needs a division but
// the channel's. INPUT0_DIMS_C and the INPUT0_PITCH_* element strides are defines kuiper adds. Tensors and
// weights are store_t, read and written through LOAD and STORE (store.h): float, or half with precision fp16.
#include "store.h"

__kernel void channel_scale(__global store_t* restrict y, __global const store_t* restrict x,
                            __global const store_t* restrict scale, __global const store_t* restrict shift) {
    const int w = get_global_id(0), h = get_global_id(1), nc = get_global_id(2);
    const int c = nc % INPUT0_DIMS_C;
    const int i = nc * INPUT0_PITCH_C + h * INPUT0_PITCH_H + w;
    STORE(y, i, LOAD(x, i) * LOAD(scale, c) + LOAD(shift, c));
}
