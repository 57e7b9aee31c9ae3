// pnnx.Expression: one work-item per output element, the formula compiled in.
//
// kuiper/opencl/expression.py writes the parsed expression as OpenCL C and passes it in two macros, e.g.
// for expr=add(mul(@0,@1),2):
//     -DINPUTS=INPUT(0),INPUT(1)                    the kernel's parameters for the inputs it reads
//     -DEXPR=fn_add(fn_mul(IN(0),IN(1)),2.0f)      the value of output element i
// Every function pnnx writes is fn_<name> below, so the generator is a plain rename; the values carry no
// spaces (build options are split at spaces). One program per distinct expression, whatever the shapes.
// Inputs and output are stored as cl/store.h says; the formula computes in float either way.
//
// Broadcasting: the host merges dims and gives the output's extents `dims` (innermost first, padded with
// 1s to 8) and, per input, its strides in elements over those dims, 0 where the input is broadcast. Work-item
// i finds its coordinates over `dims` once; each input's element is then a dot product with its strides.

#include "store.h"
#include "lanes.h"

#define INPUT(k) __global const store_t* restrict in##k, const int8 st##k
#ifdef ROWS  // (see the kernel) input k's element x of the row: from the row's first, base##k, x steps along it
// of STEPk (-DSTEPk, stk.s0 as a constant: 0 or 1), so that the compiler loads a broadcast input's value once
// for the row and a whole one's in vectors
#define BASE(k) const int base##k = offset(c, st##k);
#define IN(k) LOAD(in##k, base##k + x * STEP##k)
#else
#define IN(k) LOAD(in##k, offset(c, st##k))
#endif

// ---- the functions, in float32 with numpy's (and PyTorch's) semantics ------------------------------------
float fn_neg(float a) { return -a; }
float fn_abs(float a) { return fabs(a); }
// numpy keeps NaN where OpenCL's sign gives 0
float fn_sign(float a) { return isnan(a) ? a : sign(a); }
float fn_square(float a) { return a * a; }
float fn_sqrt(float a) { return sqrt(a); }
float fn_rsqrt(float a) { return rsqrt(a); }
float fn_reciprocal(float a) { return 1.0f / a; }
float fn_exp(float a) { return exp(a); }
float fn_log(float a) { return log(a); }
float fn_log10(float a) { return log10(a); }
float fn_erf(float a) { return erf(a); }
float fn_floor(float a) { return floor(a); }
float fn_ceil(float a) { return ceil(a); }
float fn_trunc(float a) { return trunc(a); }
float fn_round(float a) { return rint(a); }  // halves to even, like torch.round
float fn_sin(float a) { return sin(a); }
float fn_cos(float a) { return cos(a); }
float fn_tan(float a) { return tan(a); }
float fn_asin(float a) { return asin(a); }
float fn_acos(float a) { return acos(a); }
float fn_atan(float a) { return atan(a); }
float fn_sinh(float a) { return sinh(a); }
float fn_cosh(float a) { return cosh(a); }
float fn_tanh(float a) { return tanh(a); }
float fn_asinh(float a) { return asinh(a); }
float fn_acosh(float a) { return acosh(a); }
float fn_atanh(float a) { return atanh(a); }

float fn_add(float a, float b) { return a + b; }
float fn_sub(float a, float b) { return a - b; }
float fn_mul(float a, float b) { return a * b; }
float fn_div(float a, float b) { return a / b; }
float fn_fmod(float a, float b) { return fmod(a, b); }  // the dividend's sign, like C
float fn_pow(float a, float b) { return pow(a, b); }
float fn_atan2(float a, float b) { return atan2(a, b); }

// Python's a % b: the divisor's sign. Built on fmod, which is exact, as numpy does (OpenCL's own
// `remainder` rounds the quotient to nearest, a third convention)
float fn_remainder(float a, float b) {
    const float mod = fmod(a, b);
    if (mod == 0.0f) {
        return copysign(0.0f, b);
    }
    return (mod < 0.0f) != (b < 0.0f) ? mod + b : mod;  // a NaN mod (b = 0) stays NaN either way
}

// Python's a // b, numpy's way: (a - a % b) / b is an integer up to rounding, so snap it to the nearest
// one instead of flooring a / b, which can land just below an exact quotient
float fn_floor_divide(float a, float b) {
    if (b == 0.0f) {
        return a / b;
    }
    const float mod = fmod(a, b);
    float quotient = (a - mod) / b;
    if (mod != 0.0f && (mod < 0.0f) != (b < 0.0f)) {
        quotient -= 1.0f;
    }
    if (quotient == 0.0f) {
        return copysign(0.0f, a / b);
    }
    const float floored = floor(quotient);
    return quotient - floored > 0.5f ? floored + 1.0f : floored;
}

// torch.maximum/minimum propagate NaN; fmax/fmin would drop it
float fn_maximum(float a, float b) { return isnan(a) || isnan(b) ? a + b : fmax(a, b); }
float fn_minimum(float a, float b) { return isnan(a) || isnan(b) ? a + b : fmin(a, b); }
#define fn_max fn_maximum
#define fn_min fn_minimum

// log(e^a + e^b) without overflow: the larger exponent factored out (equal ones, infinities included, apart)
float fn_logaddexp(float a, float b) {
    if (a == b) {
        return a + M_LN2_F;
    }
    const float d = a - b;
    return d > 0.0f ? a + log1p(exp(-d)) : d <= 0.0f ? b + log1p(exp(d)) : d;  // d NaN: NaN
}

// ---- indexing -------------------------------------------------------------------------------------------
// Peel coordinate k off what is left of i; the last dim there takes the rest, with no division. ndim is
// the same for every work-item, so the early return never diverges, and a layout merged to few dims (one,
// when every input is whole or a scalar) pays for few divisions.
#define PEEL(k)                    \
    if (ndim == k + 1) {           \
        c.s##k = i;                \
        return c;                  \
    }                              \
    c.s##k = i % dims.s##k;        \
    i /= dims.s##k;

// the coordinates of output element i over dims (innermost first)
int8 coordinates(int i, const int8 dims, const int ndim) {
    int8 c = (int8)(0);
    PEEL(0) PEEL(1) PEEL(2) PEEL(3) PEEL(4) PEEL(5) PEEL(6)
    c.s7 = i;
    return c;
}

int offset(const int8 c, const int8 strides) {
    const int8 p = c * strides;
    return p.s0 + p.s1 + p.s2 + p.s3 + p.s4 + p.s5 + p.s6 + p.s7;
}

// ndim: how many of the 8 dims are left after merging. With ROWS (CPUs), work-item (s, r) computes the run
// s of `span` elements of row r of the innermost dim: the other coordinates, and each input's offset there
// (base##k, declared by BASES), are found once per run, and the loop along the row is one PoCL vectorizes.
// A division per element would cost more than the formula (docs/tuning.md). Global size (runs per row, rows).
// Without ROWS (GPUs), work-item (i, 0) computes element i, for neighbouring addresses in neighbouring
// work-items. Global size (n rounded up, 1).
__kernel OWN_LANES void expression(__global store_t* restrict out, const int n, const int span, const int ndim,
                         const int8 dims, INPUTS) {
#ifdef ROWS
    const int s = get_global_id(0), r = get_global_id(1);
    const int8 c = coordinates(r * dims.s0, dims, ndim);  // the row's first element: c.s0 = 0
    BASES
    const int end = min(dims.s0, (s + 1) * span);
    for (int x = s * span; x < end; ++x) {
        const int i = r * dims.s0 + x;
        STORE(out, i, EXPR);
    }
#else
    const int i = get_global_id(0);
    if (i >= n) return;
    const int8 c = coordinates(i, dims, ndim);
    STORE(out, i, EXPR);
#endif
}
