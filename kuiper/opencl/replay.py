"""A forward replayed: what one forward of a plan enqueued, enqueued again without the graph walk.

For inputs of the same shapes, every operator of a plan enqueues the same kernels with the same arguments: its
buffers are the plan's, its variants were chosen per shape, its scalars follow from the shapes. What costs the
host time is finding them again: the BFS, each layer's forward_opencl, the argument packing. At batch 1 on a
fast GPU that walk takes longer than the device takes to compute (docs/performance.md). So the OpenCL executor
records the second forward of each plan (Enqueuer.recording), and later forwards upload their inputs and enqueue
the recording: one call per kernel, whose arguments were set once on a Kernel object of its own. CUDA graphs do
the same for torch. Not the first: making those Kernel objects costs several walks, which a plan used once (a
server's packed step of a length it meets once) would pay for nothing.

An operator that uploads anything of its own or waits for the device (one that reads a tensor back, one with no
OpenCL forward) depends on more than its shapes, and so does a layer whose launches follow state it keeps
(`replayable = False`, kuiper/opencl/layer.py): the recording keeps such an operator itself, and a replay runs
it again, live, between the launches of the others. A layer whose launches read host data that changes from one
forward to the next, in buffers of its own, writes it in `refresh_opencl`, which a replay calls before the
layer's launches. A language model's decode step replays every matrix product, norm and its attention over the
paged cache (whose refresh uploads the step's page layout), and its embedding, whose ids the model checks on
the host (`ids_checked`).
A recording made before any layer's variant choice changed (`Variants.changes`, as a test or a measurement
switches kernels), or before a layer's buffers changed (`stale_recordings`), is dropped, and the next forward
records anew.
"""

from __future__ import annotations

from kuiper.core.variants import Variants
from kuiper.opencl.runtime import _cl


class Replay:
    """The launches of one recorded forward, ready to enqueue again."""

    def __init__(self, rt, recording: list, variants_changes: int):
        cl = _cl()
        # pyopencl's own binding of clEnqueueCopyBuffer where it has one: its public enqueue_copy first asks both
        # buffers their type, a cost each copy of a GPU's decode step pays (docs/performance.md)
        copy = getattr(cl._cl, "_enqueue_copy_buffer", None) or _copy
        self.variants_changes = variants_changes  # Variants.changes when the recording began
        self.steps = []
        for kind, *what in recording:
            if kind in ("live", "refresh"):  # the operator itself, to run again or to refresh (call: the kind)
                self.steps.append((kind, what[0], ()))
            elif kind == "kernel":
                kernel, global_size, local_size, args, offset = what
                bound = rt.kernel_copy(kernel, args)  # args stays in the step: the kernel keeps no buffer alive
                self.steps.append((cl.enqueue_nd_range_kernel, (bound, global_size, local_size, offset), args))
            else:
                dest, src, nbytes, dest_offset, src_offset = what
                self.steps.append((copy, (src, dest, nbytes, src_offset, dest_offset), ()))

    def __len__(self):
        return len(self.steps)

    @property
    def current(self) -> bool:
        """Whether every layer still runs the variants it ran when this was recorded."""
        return Variants.changes == self.variants_changes

    def enqueue(self, queue, live, refresh) -> None:
        """Enqueue the launches, and call live(op) for each operator kept live and refresh(op) before the launches
        of each that refreshes its buffers, in the recorded order."""
        for call, args, _ in self.steps:
            if call == "live":
                live(args)
            elif call == "refresh":
                refresh(args)
            else:
                call(queue, *args)


def stale_recordings() -> None:
    """Drop every recorded forward: a layer's launches now read other buffers than those they recorded."""
    Variants.changes += 1


def _copy(queue, src, dest, nbytes, src_offset, dest_offset):
    """A device-to-device copy, the arguments in the order of pyopencl's own binding."""
    return _cl().enqueue_copy(queue, dest, src, byte_count=nbytes, dst_offset=dest_offset, src_offset=src_offset)
