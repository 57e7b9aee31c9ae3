// The channel scale of channel_scale.toml, over a 3-D range (W, H, N*C): no index needs a division but
// the channel's. INPUT0_DIMS_C and the INPUT0_PITCH_* element strides are defines kuiper adds.
__kernel void channel_scale(__global float* restrict y, __global const float* restrict x,
                            __global const float* restrict scale, __global const float* restrict shift) {
    const int w = get_global_id(0), h = get_global_id(1), nc = get_global_id(2);
    const int c = nc % INPUT0_DIMS_C;
    const int i = nc * INPUT0_PITCH_C + h * INPUT0_PITCH_H + w;
    y[i] = x[i] * scale[c] + shift[c];
}
