// Attention's softmax (kuiper/opencl/attention.py): the scores of a stack of products, rows of `length`
// contiguous keys, `rows_per_stack` rows per product, each row scaled, masked and softmaxed in place.
//
// The mask (mode 1: added; 2: a bool, true = masked out, MHA's reading; 3: a bool, true = takes part, SDPA's)
// is read broadcast: product z, its index in the stack split as (z0, z1, z2) over sizes (., n1, n2), row i,
// column j read mask[z0 * s0 + z1 * s1 + z2 * s2 + i * s_row + j * s_col]; columns from mask_columns on are not
// masked (MHA's appended keys). causal keeps column j of row i only for j <= i. A row left with no key
// (every score -inf) gives zeros with zero_empty_rows (PyTorch's SDPA), else NaN (its plain softmax).

#include "store.h"
#include "group_reduce.h"
#include "lanes.h"
#include "group_softmax.h"

#define NO_MASK 0
#define ADDED_MASK 1
#define TRUE_MASKS 2

// One work-group per row, like softmax_rows in softmax.cl (on CPUs a work-item); the global size is rows * local
// size exactly.
__kernel OWN_LANES void attention_softmax(__global store_t* restrict p, const int rows_per_stack, const int length,
                                const float scale, const int causal, const int zero_empty_rows,
                                __global const store_t* restrict float_mask, __global const uchar* restrict bool_mask,
                                const int mode, const int n1, const int n2, const int s0, const int s1,
                                const int s2, const int s_row, const int s_col, const int mask_columns,
                                __local float* scratch) {
    const int lid = ROW_LID;
    const int size = ROW_SIZE;
    const int row = ROW_ID;
    const long start = (long)row * length;
    const int z = row / rows_per_stack, i = row - z * rows_per_stack;
    const long mask_row = (long)(z / (n1 * n2)) * s0 + (long)(z / n2 % n1) * s1 + (long)(z % n2) * s2 +
                          (long)i * s_row;
    float m = -INFINITY;
    for (int j = lid; j < length; j += size) {
        float s = LOAD(p, start + j) * scale;
        if (causal && j > i) {
            s = -INFINITY;
        }
        if (mode != NO_MASK && j < mask_columns) {
            const long at = mask_row + (long)j * s_col;
            if (mode == ADDED_MASK) {
                s += LOAD(float_mask, at);
            } else if ((bool_mask[at] != 0) == (mode == TRUE_MASKS)) {
                s = -INFINITY;
            }
        }
        STORE(p, start + j, s);
        m = s > m ? s : m;  // fmax would be a call on PoCL; NaN is skipped either way
    }
    group_softmax(p, p, start, length, group_reduce(m, scratch, true), zero_empty_rows, scratch);
}
