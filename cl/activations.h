// The element-wise activations' formulas, act_<name>(x, a, b): `a` and `b` carry the layer's parameters
// (slope, bounds); activations without parameters ignore them. Used by cl/activation.cl's kernel and by
// the GEMM's fused epilogue (cl/gemm.cl).
#ifndef KUIPER_ACTIVATIONS_H
#define KUIPER_ACTIVATIONS_H

// Comparisons rather than fmax/fmin/clamp: those return the other operand for a NaN, while PyTorch (and
// numpy) pass NaN through; PoCL also calls them out of line instead of inlining a compare.
float clip(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// 2^t from operators only: PoCL leaves a built-in such as exp() a call per element inside a kernel's unrolled
// stores (gemm_cpu's, the depthwise rows'), which kept their fused SiLU from vectorizing: EfficientNet-V2-S's
// 100 convolutions with SiLU took 35 ms of its 57, 23 with the activation left out. 2^t is 2^n (built in the
// exponent bits) times 2^f, |f| <= 1/2, by its Taylor polynomial of degree 7 (relative error below 1e-7 before
// float rounding). Below 2^-126 it gives 0, beyond 2^128 infinity; NaN stays NaN.
// One body for float (T float, I int) and float8 (the CPU softmax rows' eight lanes): adding 1.5 * 2^23 rounds
// t to an integer n and leaves n in the low bits of the sum, so n reaches the exponent by bit casts alone, with
// no conversion (convert_int8 would be a call on PoCL).
#define EXP2_FIT_BODY(T, I)                                                                                     \
    const T n = (t + 12582912.0f) - 12582912.0f;  /* t rounded to the nearest integer (|t| < 2^22) */          \
    const T f = t - n;                                                                                          \
    const T p = 1.0f + f * (0.693147181f + f * (0.240226507f + f * (0.0555041087f + f * (0.00961812911f +       \
                f * (0.00133335581f + f * (0.000154035304f + f * 0.0000152527338f))))));                        \
    const T m = n >= -126.0f ? (n <= 127.0f ? n : 127.0f) : -126.0f;  /* a NaN takes -126: p carries it */     \
    const I k = as_##I(m + 12582912.0f) - 0x4B400000;  /* m as an integer */                                    \
    const T scaled = p * as_##T((k + 127) << 23);                                                               \
    return t < -126.0f ? 0.0f : (t >= 128.0f ? INFINITY : scaled);

float exp2_fit(float t) { EXP2_FIT_BODY(float, int) }
float8 exp2_fit8(float8 t) { EXP2_FIT_BODY(float8, int8) }
float exp_fit(float x) { return exp2_fit(x * 1.44269504088896341f); }
float8 exp_fit8(float8 x) { return exp2_fit8(x * 1.44269504088896341f); }

float act_relu(float x, float a, float b) { return x < 0.0f ? 0.0f : x; }
// 1 / (1 + e^-x): for very negative x, e^-x overflows to inf and the result is exactly 0, never NaN
float act_sigmoid(float x, float a, float b) { return 1.0f / (1.0f + exp_fit(-x)); }
float act_tanh(float x, float a, float b) { return tanh(x); }
float act_clamp(float x, float a, float b) { return clip(x, a, b); }                 // Hardtanh, ReLU6, clamp
float act_leaky_relu(float x, float a, float b) { return x >= 0.0f ? x : a * x; }
float act_silu(float x, float a, float b) { return x / (1.0f + exp_fit(-x)); }
float act_hardsigmoid(float x, float a, float b) { return clip(x / 6.0f + 0.5f, 0.0f, 1.0f); }
float act_hardswish(float x, float a, float b) { return x * clip(x / 6.0f + 0.5f, 0.0f, 1.0f); }
// GELU(x) = max(x, 0) - a Q(a), a = |x|, Q(a) = erfc(a / sqrt 2) / 2 the normal distribution's upper tail,
// with a Q(a) = -v 2^(P(v) - k a^2), v = -a / (a + 3), k = log2(e) / 2: the numpy backend's formula
// (kuiper/cpu/activations.py, _GELU_P, fitted by tools/fit_gelu.py; relative error below 2.5e-7), full
// precision in the far negative tail (float32 rounding brings it to 7e-6 at x = -11.6). One division, P and
// exp2_fit: Numerical Recipes' erfc took a second polynomial, 0.80 ms against 0.67 for ConvNeXt-T's GELU over
// 3136 x 384 floats (Debian PoCL, Zen 4), and was less precise (1.7e-5). x is clamped at 40 from above, where
// GELU(x) = x: +inf would make v inf/inf. NaN stays NaN.
float act_gelu(float x, float a_, float b_) {
    const float c = x > 40.0f ? 40.0f : x;
    const float a = c < 0.0f ? -c : c;
    const float v = -a / (a + 3.0f);
    const float p = 0.584962153f + v * (2.01055283f + v * (-0.374806405f + v * (-0.352908597f + v * (0.171191122f +
                    v * (-0.406279772f + v * (-0.739911848f + v * -0.284720321f))))));
    const float q = v * exp2_fit(p - a * a * 0.721347520f);  // -a Q(a)
    return x < 0.0f ? q : x + q;
}
// the tanh fit: x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
float act_gelu_tanh(float x, float a, float b) {
    float two_u = 1.5957691216057308f * (x + 0.044715f * x * x * x);
    return x / (1.0f + exp_fit(-two_u));
}

#endif
