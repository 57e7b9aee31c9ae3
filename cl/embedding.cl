// Embedding (kuiper/opencl/embedding.py): row ids[t] of the table becomes row t of the output, a gather.
//
//   out[t, j] = table[ids[t], j]      t < count ids (int64 as a rule, any INDEX type), j < dim
//
// One work-item per element, the row's elements along dimension 0: neighbouring work-items copy neighbouring
// elements of one row, unit-stride reads and writes on a GPU and whole vectors on a CPU driver that merges them.

#include "store.h"

#ifndef INDEX
#define INDEX long  // the ids' integer type (kuiper/opencl/indices.py)
#endif

__kernel void embedding_rows(__global store_t* restrict out, __global const INDEX* restrict ids,
                             __global const store_t* restrict table, const int count, const int dim,
                             const long rows) {
    const int j = get_global_id(0);
    const int t = get_global_id(1);
    if (j >= dim || t >= count) {
        return;
    }
    const long id = (long)ids[t];
    // the host has checked every id already; an id out of range still reads nothing past the table, and gives
    // NaN rather than another row
    STORE(out, (long)t * dim + j, id >= 0 && id < rows ? LOAD(table, id * dim + j) : NAN);
}
