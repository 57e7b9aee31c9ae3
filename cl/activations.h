// The element-wise activations' formulas, act_<name>(x, a, b): `a` and `b` carry the layer's parameters
// (slope, bounds); activations without parameters ignore them. Used by cl/activation.cl's kernel and by
// the GEMM's fused epilogue (cl/gemm.cl).
#ifndef KUIPER_ACTIVATIONS_H
#define KUIPER_ACTIVATIONS_H

// Comparisons rather than fmax/fmin/clamp: those return the other operand for a NaN, while PyTorch (and
// numpy) pass NaN through; PoCL also calls them out of line instead of inlining a compare.
float clip(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// e^x from operators only: PoCL leaves a built-in such as exp() a call per element inside a kernel's unrolled
// stores (gemm_cpu's, the depthwise rows'), which kept their fused SiLU from vectorizing: EfficientNet-V2-S's
// 100 convolutions with SiLU took 35 ms of its 57, 23 with the activation left out. Here 2^t, t = x log2 e, is
// 2^n (built in the exponent bits) times 2^f, |f| <= 1/2, by its Taylor polynomial of degree 7 (relative error
// below 1e-7 before float rounding). Below 2^-126 it gives 0, beyond 2^128 infinity; NaN stays NaN.
float exp_fit(float x) {
    const float t = x * 1.44269504088896341f;
    const float n = (t + 12582912.0f) - 12582912.0f;  // t rounded to the nearest integer (|t| < 2^22)
    const float f = t - n;
    const float p = 1.0f + f * (0.693147181f + f * (0.240226507f + f * (0.0555041087f + f * (0.00961812911f +
                    f * (0.00133335581f + f * (0.000154035304f + f * 0.0000152527338f))))));
    const float m = n >= -126.0f ? (n <= 127.0f ? n : 127.0f) : -126.0f;  // a NaN takes -126: p carries it
    const float scaled = p * as_float((uint)((int)m + 127) << 23);
    return t < -126.0f ? 0.0f : (t >= 128.0f ? INFINITY : scaled);
}

float act_relu(float x, float a, float b) { return x < 0.0f ? 0.0f : x; }
// 1 / (1 + e^-x): for very negative x, e^-x overflows to inf and the result is exactly 0, never NaN
float act_sigmoid(float x, float a, float b) { return 1.0f / (1.0f + exp_fit(-x)); }
float act_tanh(float x, float a, float b) { return tanh(x); }
float act_clamp(float x, float a, float b) { return clip(x, a, b); }                 // Hardtanh, ReLU6, clamp
float act_leaky_relu(float x, float a, float b) { return x >= 0.0f ? x : a * x; }
float act_silu(float x, float a, float b) { return x / (1.0f + exp_fit(-x)); }
float act_hardsigmoid(float x, float a, float b) { return clip(x / 6.0f + 0.5f, 0.0f, 1.0f); }
float act_hardswish(float x, float a, float b) { return x * clip(x / 6.0f + 0.5f, 0.0f, 1.0f); }
// erfc(z) for z >= 0 by Numerical Recipes' Chebyshev fit (`erfcc`: relative error below 1.2e-7 for every
// z >= 0, so the far tail keeps its precision); erfc(-z) = 2 - erfc(z). One exp and a polynomial: PoCL's own
// erfc is a library call that ran convnext_tiny's GELUs at ~50 ns per element.
float erfc_fit(float x) {
    const float z = fabs(x), t = 1.0f / (1.0f + 0.5f * z);
    const float p = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f +
                    t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    const float e = t * exp_fit(-z * z + p);
    return x >= 0.0f ? e : 2.0f - e;
}
// x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: erfc keeps full precision in the far negative tail
float act_gelu(float x, float a, float b) { return 0.5f * x * erfc_fit(-x * M_SQRT1_2_F); }
// the tanh fit: x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
float act_gelu_tanh(float x, float a, float b) {
    float two_u = 1.5957691216057308f * (x + 0.044715f * x * x * x);
    return x / (1.0f + exp_fit(-two_u));
}

#endif
