"""A forward replayed: what one forward of a plan enqueued, enqueued again without the graph walk.

For inputs of the same shapes, every operator of a plan enqueues the same kernels with the same arguments: its
buffers are the plan's, its variants were chosen per shape, its scalars follow from the shapes. What costs the
host time is finding them again: the BFS, each layer's forward_opencl, the argument packing. At batch 1 on a
fast GPU that walk takes longer than the device takes to compute (docs/performance.md). So the OpenCL executor
records the first forward of each plan (Enqueuer.recording), and later forwards upload their inputs and enqueue
the recording: one call per kernel, whose arguments were set once on a Kernel object of its own. CUDA graphs do
the same for torch.

A forward that uploads anything of its own or waits for the device (an operator that reads a tensor back, one
with no OpenCL forward) depends on more than its shapes: the Enqueuer then stops recording and that plan always
walks the graph. So does a layer whose launches follow state it keeps (`replayable = False`, kuiper/opencl/
layer.py).
"""

from __future__ import annotations

from kuiper.opencl.runtime import _cl


class Replay:
    """The launches of one recorded forward, ready to enqueue again."""

    def __init__(self, rt, recording: list):
        cl = _cl()
        self.steps = []
        for kind, *what in recording:
            if kind == "kernel":
                kernel, global_size, local_size, args, offset = what
                bound = rt.kernel_copy(kernel)
                bound.set_args(*args)  # the buffers in args stay referenced by the kernel's arguments here
                self.steps.append((cl.enqueue_nd_range_kernel, (bound, global_size, local_size, offset), args))
            else:
                dest, src, nbytes, dest_offset, src_offset = what
                self.steps.append((_copy, (dest, src, nbytes, dest_offset, src_offset), ()))

    def __len__(self):
        return len(self.steps)

    def enqueue(self, queue) -> None:
        for call, args, _ in self.steps:
            call(queue, *args)


def _copy(queue, dest, src, nbytes, dest_offset, src_offset):
    _cl().enqueue_copy(queue, dest, src, byte_count=nbytes, dst_offset=dest_offset, src_offset=src_offset)
