// The element-wise activations' formulas, act_<name>(x, a, b): `a` and `b` carry the layer's parameters
// (slope, bounds); activations without parameters ignore them. Used by cl/activation.cl's kernel and by
// the GEMM's fused epilogue (cl/gemm.cl).
#ifndef KUIPER_ACTIVATIONS_H
#define KUIPER_ACTIVATIONS_H

// Comparisons rather than fmax/fmin/clamp: those return the other operand for a NaN, while PyTorch (and
// numpy) pass NaN through; PoCL also calls them out of line instead of inlining a compare.
float clip(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

float act_relu(float x, float a, float b) { return x < 0.0f ? 0.0f : x; }
// 1 / (1 + e^-x): for very negative x, e^-x overflows to inf and the result is exactly 0, never NaN
float act_sigmoid(float x, float a, float b) { return 1.0f / (1.0f + exp(-x)); }
float act_tanh(float x, float a, float b) { return tanh(x); }
float act_clamp(float x, float a, float b) { return clip(x, a, b); }                 // Hardtanh, ReLU6, clamp
float act_leaky_relu(float x, float a, float b) { return x >= 0.0f ? x : a * x; }
float act_silu(float x, float a, float b) { return x / (1.0f + exp(-x)); }
float act_hardsigmoid(float x, float a, float b) { return clip(x / 6.0f + 0.5f, 0.0f, 1.0f); }
float act_hardswish(float x, float a, float b) { return x * clip(x / 6.0f + 0.5f, 0.0f, 1.0f); }
// x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: erfc keeps full precision in the far negative tail
float act_gelu(float x, float a, float b) { return 0.5f * x * erfc(-x * M_SQRT1_2_F); }
// the tanh fit: x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
float act_gelu_tanh(float x, float a, float b) {
    float two_u = 1.5957691216057308f * (x + 0.044715f * x * x * x);
    return x / (1.0f + exp(-two_u));
}

#endif
