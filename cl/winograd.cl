// Winograd's F(m x m, 3x3) for a 3x3 stride-1 convolution (kuiper/opencl/winograd.py runs it; the method and
// its matrices are kuiper/winograd.py's). Three steps, the middle one cl/gemm.cl's stacked GEMM:
//
//   winograd_input    each a x a input tile d (a = m + 2; tiles m apart, overlapping by 2) to B^T d B
//   (GEMM)            for each of the a*a positions p: Mp (Cout, tiles) = Up (Cout, Cin) @ Vp (Cin, tiles)
//   winograd_output   each tile's A^T M A, the m x m outputs, plus the bias and the fused epilogue
//
// The host builds them with -DWM=m and the matrices' entries row by row (-DWINO_BT=..., -DWINO_AT=...): after
// unrolling, every matrix entry is a constant, and the `!= 0.0f` tests drop the terms with a zero entry at
// compile time. The products are written out in each kernel: PoCL does not fold the entries through a
// function's array argument (2-4x slower transforms). V and M, the transformed tiles, are float whatever the
// storage precision: the transforms add numbers up to ~100x the inputs' size that cancel in the end, which
// half would round away.
//
// Tile t is tile (ty, tx) of batch item t / (tiles_h * tiles_w); work-item (t, c) handles one channel of it,
// so consecutive work-items read and write consecutive tiles: V and M are laid out (a*a, channels, tiles).
#include "epilogue.h"
#include "lanes.h"

#define WA (WM + 2)

__kernel OWN_LANES void winograd_input(__global float* restrict V, __global const store_t* restrict x, const int channels,
                             const int height, const int width, const int pad_h, const int pad_w,
                             const int tiles_h, const int tiles_w, const int tiles) {
    const int t = get_global_id(0), c = get_global_id(1);
    if (t >= tiles) return;
    const int per_item = tiles_h * tiles_w;
    const int top = t % per_item / tiles_w * WM - pad_h, left = t % tiles_w * WM - pad_w;
    const __global store_t* plane = x + ((long)(t / per_item) * channels + c) * height * width;
    const float bt[WA][WA] = {WINO_BT};

    float d[WA][WA];  // the tile, 0 in the padding
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        const int y = top + i;
        #pragma unroll
        for (int j = 0; j < WA; ++j) {
            const int col = left + j;
            d[i][j] = y >= 0 && y < height && col >= 0 && col < width ? LOAD(plane, y * width + col) : 0.0f;
        }
    }
    float e[WA][WA];  // B^T d
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) {
            float s = 0.0f;
            #pragma unroll
            for (int k = 0; k < WA; ++k) if (bt[i][k] != 0.0f) s += bt[i][k] * d[k][j];
            e[i][j] = s;
        }
    }
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) {  // (B^T d) B: row j of B^T is column j of B
            float s = 0.0f;
            #pragma unroll
            for (int k = 0; k < WA; ++k) if (bt[j][k] != 0.0f) s += e[i][k] * bt[j][k];
            V[((long)(i * WA + j) * channels + c) * tiles + t] = s;
        }
    }
}

// Not OWN_LANES: Intel's runtime then merges work-items into vector lanes as PoCL does, which makes a fused
// activation vector code (SiLU after 48 channels at 56x56: 0.99 -> 0.72 ms; Zen 4, 2 threads)
__kernel void winograd_output(__global store_t* restrict y, __global const float* restrict M,
                              __global const store_t* restrict bias, const int has_bias, EPILOGUE_ARGS,
                              const int channels, const int out_h, const int out_w, const int tiles_h,
                              const int tiles_w, const int tiles) {
    const int t = get_global_id(0), o = get_global_id(1);
    if (t >= tiles) return;
    const int per_item = tiles_h * tiles_w;
    const int top = t % per_item / tiles_w * WM, left = t % tiles_w * WM;
    const long plane = ((long)(t / per_item) * channels + o) * out_h * out_w;
    const float at[WM][WA] = {WINO_AT};

    float m[WA][WA];
    #pragma unroll
    for (int i = 0; i < WA; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) m[i][j] = M[((long)(i * WA + j) * channels + o) * tiles + t];
    }
    float f[WM][WA];  // A^T M
    #pragma unroll
    for (int i = 0; i < WM; ++i) {
        #pragma unroll
        for (int j = 0; j < WA; ++j) {
            float s = 0.0f;
            #pragma unroll
            for (int k = 0; k < WA; ++k) if (at[i][k] != 0.0f) s += at[i][k] * m[k][j];
            f[i][j] = s;
        }
    }
    const float b = has_bias ? LOAD(bias, o) : 0.0f;
    #pragma unroll
    for (int i = 0; i < WM; ++i) {
        #pragma unroll
        for (int j = 0; j < WM; ++j) {  // (A^T M) A, stored where the tile lies inside the output
            float s = b;
            #pragma unroll
            for (int k = 0; k < WA; ++k) if (at[j][k] != 0.0f) s += f[i][k] * at[j][k];
            if (top + i < out_h && left + j < out_w) {
                const long index = plane + (top + i) * out_w + left + j;
                STORE(y, index, epilogue(s, residual, index, act_a, act_b));
            }
        }
    }
}
