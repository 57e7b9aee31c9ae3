// A fused operator's epilogue (kuiper/opencl/gemm.py: KernelEpilogue), applied by the kernels that store a
// convolution's or a linear layer's output (cl/gemm.cl, cl/conv.cl, cl/winograd.cl) to each value as it is
// stored, after the bias: with -DADD it adds `residual`, a tensor laid out like the output (the other operand of
// a fused residual sum), then with -DACT=act_<name> the activation (cl/activations.h) with parameters (act_a,
// act_b).
#ifndef KUIPER_EPILOGUE_H
#define KUIPER_EPILOGUE_H

#include "store.h"
#ifdef ACT
#include "activations.h"
#endif

#define EPILOGUE_ARGS __global const store_t* restrict residual, const float act_a, const float act_b

// v plus element i of the residual under -DADD, else v
inline float add_residual(float v, __global const store_t* residual, long i) {
#ifdef ADD
    v += LOAD(residual, i);
#endif
    return v;
}

// v (one output value, bias added) through the epilogue; i is its index in the output (and in residual)
inline float epilogue(float v, __global const store_t* residual, long i, float act_a, float act_b) {
    v = add_residual(v, residual, i);
#ifdef ACT
    v = ACT(v, act_a, act_b);
#endif
    return v;
}

// epilogue4, epilogue8, epilogue16: the same on N consecutive values, the lanes of v from index i, with the
// activation's vector form (cl/activations.h). Kernels that hold their outputs in vectors (gemm_cpu,
// depthwise_rows, grouped_rows, winograd_output_rows) call these before storing the lanes, so that the formula
// is vector code on every CPU driver: value by value, an exponential stays scalar code in their stores, slower
// than an activation kernel of its own on PoCL and than the vector form on Intel's runtime, which does not merge
// OWN_LANES kernels' work-items into vectors. Kernels whose work-items the drivers do merge (winograd_output)
// keep the scalar epilogue: explicit vectors there slow PoCL down.
#define KUIPER_PASTE_(a, b) a##b
#define KUIPER_PASTE(a, b) KUIPER_PASTE_(a, b)
#ifdef ACT
#define ACTIVATE_LANES(v, N) KUIPER_PASTE(ACT, N)(v, act_a, act_b)
#else
#define ACTIVATE_LANES(v, N) (v)
#endif
// epilogue8_part and the like: the same where only the first `count` lanes are outputs (the last block of a
// row): the residual is read for those alone, and the activation still runs on the whole vector. Lane by lane,
// an activation after a depthwise convolution of 7x7 planes (every block partial) costs several times the
// convolution on PoCL.
#define VECTOR_EPILOGUE(T, N)                                                                                  \
    inline T epilogue##N##_part(T v, __global const store_t* residual, long i, int count, float act_a,         \
                                float act_b) {                                                                 \
        union { T v; float s[N]; } lanes = {v};                                                                \
        for (int l = 0; l < count; ++l) lanes.s[l] = add_residual(lanes.s[l], residual, i + l);                \
        return ACTIVATE_LANES(lanes.v, N);                                                                     \
    }                                                                                                          \
    inline T epilogue##N(T v, __global const store_t* residual, long i, float act_a, float act_b) {            \
        return epilogue##N##_part(v, residual, i, N, act_a, act_b);                                            \
    }
VECTOR_EPILOGUE(float4, 4)
VECTOR_EPILOGUE(float8, 8)
VECTOR_EPILOGUE(float16, 16)

#endif
