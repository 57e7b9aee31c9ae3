// OWN_LANES before a kernel: its work-items are not to be merged into the lanes of a vector.
// Intel's CPU runtime vectorizes every kernel across neighbouring work-items unless told otherwise. That
// suits kernels of one element a work-item (the activations), but kernels whose work-item walks a row,
// gathers taps or already computes in vectors run several times slower merged (docs/tuning.md).
// intel_vec_len_hint(1) turns the merging off for one kernel; other drivers, which lack the extension, see
// nothing.
#ifndef KUIPER_LANES_H
#define KUIPER_LANES_H
#ifdef cl_intel_vec_len_hint
#define OWN_LANES __attribute__((intel_vec_len_hint(1)))
#else
#define OWN_LANES
#endif
#endif
