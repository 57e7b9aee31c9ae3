// A fused operator's epilogue (kuiper/opencl/gemm.py: KernelEpilogue), applied by the kernels that store a
// convolution's or a linear layer's output (cl/gemm.cl, cl/winograd.cl) to each value as it is stored, after
// the bias: with -DADD it adds `residual`, a tensor laid out like the output (the other operand of a fused
// residual sum), then with -DACT=act_<name> the activation (cl/activations.h) with parameters (act_a, act_b).
#ifndef KUIPER_EPILOGUE_H
#define KUIPER_EPILOGUE_H

#include "store.h"
#ifdef ACT
#include "activations.h"
#endif

#define EPILOGUE_ARGS __global const store_t* restrict residual, const float act_a, const float act_b

// v (one output value, bias added) through the epilogue; i is its index in the output (and in residual)
inline float epilogue(float v, __global const store_t* residual, long i, float act_a, float act_b) {
#ifdef ADD
    v += LOAD(residual, i);
#endif
#ifdef ACT
    v = ACT(v, act_a, act_b);
#endif
    return v;
}

#endif
