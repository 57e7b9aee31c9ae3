// The element-wise activations' formulas, act_<name>(x, a, b): `a` and `b` carry the layer's parameters
// (slope, bounds); activations without parameters ignore them. Used by cl/activation.cl's kernel and by
// the fused epilogues (cl/epilogue.h).
#ifndef KUIPER_ACTIVATIONS_H
#define KUIPER_ACTIVATIONS_H

// Every formula is written once, for a float type T of lanes S (I the int type of as many lanes), and defined
// for float (act_relu, ...) and float4, float8, float16 (act_relu4, act_relu8, act_relu16, ...): kernels that
// hold their outputs in vectors (gemm_cpu's blocks, the depthwise rows) run the activation on whole vectors in
// their stores (cl/epilogue.h); one element at a time the formula stays scalar code on every CPU driver. A
// comparison of vectors gives a mask, and ?: then picks lane by lane, so one body serves every width.
#define ACTIVATIONS(T, I, S)                                                                                    \
/* Comparisons rather than fmax/fmin/clamp: those return the other operand for a NaN, while PyTorch (and numpy)  \
   pass NaN through; PoCL also calls them out of line instead of inlining a compare. */                         \
T clip##S(T x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }                                 \
                                                                                                                \
/* 2^t from operators only: PoCL leaves a built-in such as exp() a call per element inside a kernel's unrolled  \
   stores (gemm_cpu's, the depthwise rows'), which keeps their fused SiLU from vectorizing (docs/tuning.md).    \
   2^t is 2^n (built in the exponent bits) times 2^f, |f| <= 1/2, by its Taylor polynomial of degree 7          \
   (relative error below 1e-7 before float rounding). Below 2^-126 it gives 0, beyond 2^128 infinity; NaN       \
   stays NaN. Adding 1.5 * 2^23 rounds t to an integer n and leaves n in the low bits of the sum, so n reaches  \
   the exponent by bit casts alone, with no conversion (convert_int8 would be a call on PoCL). */               \
T exp2_fit##S(T t) {                                                                                            \
    const T n = (t + 12582912.0f) - 12582912.0f;  /* t rounded to the nearest integer (|t| < 2^22) */          \
    const T f = t - n;                                                                                          \
    const T p = 1.0f + f * (0.693147181f + f * (0.240226507f + f * (0.0555041087f + f * (0.00961812911f +       \
                f * (0.00133335581f + f * (0.000154035304f + f * 0.0000152527338f))))));                        \
    const T m = n >= -126.0f ? (n <= 127.0f ? n : 127.0f) : -126.0f;  /* a NaN takes -126: p carries it */     \
    const I k = as_##I(m + 12582912.0f) - 0x4B400000;  /* m as an integer */                                    \
    const T scaled = p * as_##T((k + 127) << 23);                                                               \
    return t < -126.0f ? 0.0f : (t >= 128.0f ? INFINITY : scaled);                                              \
}                                                                                                               \
T exp_fit##S(T x) { return exp2_fit##S(x * 1.44269504088896341f); }                                             \
                                                                                                                \
T act_relu##S(T x, float a, float b) { return x < 0.0f ? 0.0f : x; }                                           \
/* 1 / (1 + e^-x): for very negative x, e^-x overflows to inf and the result is exactly 0, never NaN */        \
T act_sigmoid##S(T x, float a, float b) { return 1.0f / (1.0f + exp_fit##S(-x)); }                              \
/* tanh from exp_fit too, not the built-in: the PoCL wheel from PyPI loads a program whose float16 tanh()        \
   it compiled for AVX2 back from its cache with no kernels in it. (1 - e^-2a) / (1 + e^-2a), a = |x|, loses     \
   digits to the subtraction near 0: below a = 1/8 the Taylor series to a^7 instead (error below 2e-9). */    \
T act_tanh##S(T x, float a_, float b_) {                                                                        \
    const T a = x < 0.0f ? -x : x;                                                                              \
    const T e = exp_fit##S(-2.0f * a);                                                                          \
    const T a2 = a * a;                                                                                         \
    const T r = a < 0.125f ? a + a * a2 * (-0.333333333f + a2 * (0.133333333f + a2 * -0.0539682540f))          \
                           : (1.0f - e) / (1.0f + e);                                                           \
    return x < 0.0f ? -r : r;                                                                                   \
}                                                                                                               \
T act_clamp##S(T x, float a, float b) { return clip##S(x, a, b); }  /* Hardtanh, ReLU6, clamp */                \
T act_leaky_relu##S(T x, float a, float b) { return x >= 0.0f ? x : a * x; }                                    \
T act_silu##S(T x, float a, float b) { return x / (1.0f + exp_fit##S(-x)); }                                    \
T act_hardsigmoid##S(T x, float a, float b) { return clip##S(x / 6.0f + 0.5f, 0.0f, 1.0f); }                    \
T act_hardswish##S(T x, float a, float b) { return x * clip##S(x / 6.0f + 0.5f, 0.0f, 1.0f); }                  \
/* GELU(x) = max(x, 0) - a Q(a), a = |x|, Q(a) = erfc(a / sqrt 2) / 2 the normal distribution's upper tail,     \
   with a Q(a) = -v 2^(P(v) - k a^2), v = -a / (a + 3), k = log2(e) / 2: the numpy backend's formula             \
   (kuiper/cpu/activations.py, _GELU_P, fitted by tools/fit_gelu.py; relative error below 2.5e-7), full          \
   precision in the far negative tail (float32 rounding brings it to 7e-6 at x = -11.6). One division, P and    \
   exp2_fit: Numerical Recipes' erfc takes a second polynomial, is slower and less precise (1.7e-5). x is        \
   clamped at 40 from above, where GELU(x) = x: +inf would make v inf/inf. NaN stays NaN. */                     \
T act_gelu##S(T x, float a_, float b_) {                                                                        \
    const T c = x > 40.0f ? 40.0f : x;                                                                          \
    const T a = c < 0.0f ? -c : c;                                                                              \
    const T v = -a / (a + 3.0f);                                                                                \
    const T p = 0.584962153f + v * (2.01055283f + v * (-0.374806405f + v * (-0.352908597f + v * (0.171191122f +\
                v * (-0.406279772f + v * (-0.739911848f + v * -0.284720321f))))));                              \
    const T q = v * exp2_fit##S(p - a * a * 0.721347520f);  /* -a Q(a) */                                      \
    return x < 0.0f ? q : x + q;                                                                                \
}                                                                                                               \
/* the tanh fit: x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) */                                          \
T act_gelu_tanh##S(T x, float a, float b) {                                                                     \
    const T two_u = 1.5957691216057308f * (x + 0.044715f * x * x * x);                                         \
    return x / (1.0f + exp_fit##S(-two_u));                                                                     \
}

ACTIVATIONS(float, int, )
ACTIVATIONS(float4, int4, 4)
ACTIVATIONS(float8, int8, 8)
ACTIVATIONS(float16, int16, 16)

#endif
