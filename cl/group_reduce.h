// A work-group combining one float per work-item, shared by the kernels that give a whole row to a group
// (softmax_rows, reduce_rows): each work-item first folds its own strided share of the row, then this
// combines the partial results in local memory, halving the active work-items each step.

#ifndef KUIPER_GROUP_REDUCE_H
#define KUIPER_GROUP_REDUCE_H

// The maximum (maximum true) or the sum of v over the group, returned to every work-item. scratch holds one
// float per work-item; the group size is a power of two; every work-item of the group must call it.
float group_reduce(float v, __local float* scratch, const bool maximum) {
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
}

#endif
