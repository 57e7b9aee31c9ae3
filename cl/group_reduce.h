// A work-group combining one float per work-item, shared by the kernels that give a whole row to a group
// (softmax_rows, reduce_rows): each work-item first folds its own strided share of the row, then this
// combines the partial results in local memory, halving the active work-items each step (on GPUs: see ROW_EACH).

#ifndef KUIPER_GROUP_REDUCE_H
#define KUIPER_GROUP_REDUCE_H

// The row a kernel's group works on, and this work-item's place in the group. On CPUs (-DROW_EACH) a work-item
// takes a row alone and a work-group holds many rows: Intel's runtime pays for every group it starts and for its
// barriers, which made groups of one work-item 4x as slow on ConvNeXt's LayerNorm (docs/opencl-kernels.md).
#ifdef ROW_EACH
#define ROW_ID ((int)get_global_id(0))
#define ROW_LID 0
#define ROW_SIZE 1
#else
#define ROW_ID ((int)get_group_id(0))
#define ROW_LID ((int)get_local_id(0))
#define ROW_SIZE ((int)get_local_size(0))
#endif

// The maximum (maximum true) or the sum of v over the group, returned to every work-item. scratch holds one
// float per work-item; the group size is a power of two; every work-item of the group must call it.
float group_reduce(float v, __local float* scratch, const bool maximum) {
#ifdef ROW_EACH
    return v;  // the work-item's own row: nothing to combine
#else
    const int lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = get_local_size(0) / 2; width > 0; width /= 2) {
        if (lid < width) {
            const float other = scratch[lid + width];
            scratch[lid] = maximum ? fmax(scratch[lid], other) : scratch[lid] + other;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // the next call may overwrite scratch[0]
    return result;
#endif
}

#endif
