// torch.sum / torch.mean over some dims. Each output is the sum of its reduced elements divided by
// `divisor`: 1 for a sum, the number of reduced elements for a mean.
//
// torch.norm builds the same kernels with -DNORM=<mode>: each element v enters the sum as TERM(v), and the
// sum leaves as FINISH(sum). Modes 4 and 5, the largest and the smallest |v|, keep the largest TERM instead
// of a sum (EXTREME): the smallest |v| is minus the largest -|v|. torch.amax and torch.amin are modes 6 and 7,
// the largest v and minus the largest -v.

#include "group_reduce.h"
#include "store.h"

#ifndef NORM
#define TERM(v) (v)
#define FINISH(s) (s)
#elif NORM == 0  // the count of nonzeros
#define TERM(v) ((v) != 0.0f ? 1.0f : 0.0f)
#define FINISH(s) (s)
#elif NORM == 1
#define TERM(v) fabs(v)
#define FINISH(s) (s)
#elif NORM == 2
#define TERM(v) ((v) * (v))
#define FINISH(s) sqrt(s)
#elif NORM == 3  // any other p, given as -DP=<p>f
#define TERM(v) pow(fabs(v), P)
#define FINISH(s) pow(s, 1.0f / P)
#elif NORM == 4
#define EXTREME
#define TERM(v) fabs(v)
#define FINISH(s) fabs(s)
#elif NORM == 5
#define EXTREME
#define TERM(v) (-fabs(v))
#define FINISH(s) fabs(s)
#elif NORM == 6  // torch.amax: the largest v
#define EXTREME
#define TERM(v) (v)
#define FINISH(s) (s)
#elif NORM == 7  // torch.amin: minus the largest -v
#define EXTREME
#define TERM(v) (-(v))
#define FINISH(s) (-(s))
#endif

// Neumaier's compensated sum: `lost` gathers what each addition rounded away, so a long reduction (a
// global mean over a large map) stays as exact as a single float addition, in whatever order it runs.
void add_compensated(float* sum, float* lost, const float v) {
    const float t = *sum + v;
    *lost += fabs(*sum) >= fabs(v) ? (*sum - t) + v : (v - t) + *sum;
    *sum = t;
}

// sum itself is the plain running sum: an infinite or NaN one is already the answer (lost is not finite)
float compensated(const float sum, const float lost) { return isfinite(sum) ? sum + lost : sum; }

#ifdef EXTREME
// keep the largest term in *best (a NaN, once met, stays: numpy's max propagates it)
void accumulate(float* best, float* unused, const float v) {
    if (isnan(v) || v > *best) *best = v;
}
#define START (-INFINITY)
#define RESULT(sum, lost) FINISH(sum)
#else
#define accumulate add_compensated
#define START 0.0f
#define RESULT(sum, lost) FINISH(compensated(sum, lost))
#endif

// One work-item per output element. The host drops the input's size-1 dims, merges neighbours that are
// both kept or both reduced, and splits the rest into kept dims (the output's own, in order) and reduced
// dims. The two kinds alternate, so an input of up to 8 dims leaves at most 4 of each: extents and strides
// (in elements of the input) come as int4, innermost first, padded with extent 1. Consecutive work-items
// are consecutive outputs: their loads are unit-stride when the innermost dim is kept.
__kernel void reduce_lines(__global store_t* restrict y, __global const store_t* restrict x, const int n,
                           const int4 kept, const int4 kept_strides, const int4 reduced,
                           const int4 reduced_strides, const float divisor) {
    const int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    // output i's first input element: its coordinates over the kept dims times their strides
    int r = i;
    int start = (r % kept.s0) * kept_strides.s0;
    r /= kept.s0;
    start += (r % kept.s1) * kept_strides.s1;
    r /= kept.s1;
    start += (r % kept.s2) * kept_strides.s2;
    start += r / kept.s2 * kept_strides.s3;  // i < n, so what is left is the outermost coordinate

    float sum = START, lost = 0.0f;
    for (int a = 0; a < reduced.s3; ++a) {
        for (int b = 0; b < reduced.s2; ++b) {
            for (int c = 0; c < reduced.s1; ++c) {
                const int row = start + a * reduced_strides.s3 + b * reduced_strides.s2 + c * reduced_strides.s1;
                for (int d = 0; d < reduced.s0; ++d) {
                    accumulate(&sum, &lost, TERM(LOAD(x, row + d * reduced_strides.s0)));
                }
            }
        }
    }
    STORE(y, i, RESULT(sum, lost) / divisor);
}

// One work-group per output whose reduced elements are one contiguous row (the reduced dims innermost: a
// mean over H and W), for GPUs: the group strides through the row together, so its loads are unit-stride,
// and adds up its partial sums in local memory. The global size is outputs * local size exactly. Not for
// EXTREME (group_reduce's fmax would drop a NaN).
__kernel void reduce_rows(__global store_t* restrict y, __global const store_t* restrict x, const int length,
                          const float divisor, __local float* scratch) {
    const int lid = get_local_id(0);
    const int start = get_group_id(0) * length;
    float sum = 0.0f, lost = 0.0f;
    for (int j = lid; j < length; j += get_local_size(0)) {
        add_compensated(&sum, &lost, TERM(LOAD(x, start + j)));
    }
    sum = group_reduce(compensated(sum, lost), scratch, false);
    if (lid == 0) {
        STORE(y, get_group_id(0), FINISH(sum) / divisor);
    }
}
