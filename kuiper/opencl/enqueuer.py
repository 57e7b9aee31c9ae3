"""The Enqueuer: what a layer's forward_opencl enqueues through, for one forward of a graph (runtime.py has the
runtime it enqueues on). It can also record what it enqueues, for replay.py."""

from __future__ import annotations

import numpy as np

from kuiper.opencl import pinned
from kuiper.opencl.runtime import OpenCLRuntime, Scratch, _cl


class Enqueuer:
    """What a layer's forward_opencl enqueues through. In the in-order schedule every kernel goes on the
    one queue in order; in the levelized schedule each command of an operator waits on an out-of-order
    queue for the one before it, and its first command for the last events of the operator's producers.
    A layer can therefore enqueue several dependent kernels (im2col, then GEMM) as if the queue were
    in order."""

    def __init__(self, runtime: OpenCLRuntime, levels: bool = False):
        self.runtime = runtime
        self.queue = runtime.ooo_queue if levels else runtime.queue
        self.levels = levels and runtime.out_of_order
        self.events = {}      # operator name -> [events]
        self._done = {}       # operator name -> the events after which all it enqueued is complete
        self._op = self._current = None
        self._wait = None
        self._scratch_users = {}  # role -> the last operator that took the runtime's scratch for it
        # while a list, what is enqueued is also recorded there for replay.py; `live` turns True when the
        # operator being recorded depends on more than its input shapes (an upload, or a wait for the device)
        self.recording = None
        self.live = False

    def begin(self, op, producers) -> None:
        self._op = op.name
        self._current = self.events.setdefault(op.name, [])
        if self.levels:
            self._wait = [e for p in producers for e in self._done.get(p.name, ())] or None
            # an operator that enqueues nothing (an empty copy) is complete once its inputs are
            self._done[op.name] = self._wait or []

    def _issued(self, event):
        self._current.append(event)
        if self.levels:  # the operator's next command waits for this one, which waited for the rest
            self._wait = self._done[self._op] = [event]
        return event

    def scratch(self, role: str, nbytes: int):
        """The runtime's scratch buffer for `role` ("padded", "columns", ...), made at least nbytes large, for the
        operator being enqueued: a layer's working space between its own kernels, whose contents no other
        operator reads. Every operator takes the same one, so a model needs as much as its largest layer, not
        the sum (ResNet-18 at batch 8: 17 MB, not 89). In order, operators run one after another; in the
        levelized schedule the operator's next command also waits for the last one that took it. Graphs that
        share a runtime must therefore run their forwards one at a time, not from two threads at once."""
        if self.levels:
            last = self._scratch_users.get(role)
            if last is not None and last != self._op:
                self._wait = [*(self._wait or ()), *self._done[last]]
            self._scratch_users[role] = self._op
        scratch = self.runtime.scratch.get(role) or self.runtime.scratch.setdefault(role, Scratch(self.runtime))
        return scratch.fit(nbytes)

    def run(self, kernel, global_size, local_size, *args, offset=None):
        """Enqueue one kernel over `global_size` work-items (local size None lets the driver choose), their
        global ids starting at `offset` (default 0)."""
        kernel.set_args(*args)
        if self.recording is not None:
            self.recording.append(("kernel", kernel, global_size, local_size, args, offset))
        return self._issued(_cl().enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size,
                                                           global_work_offset=offset, wait_for=self._wait))

    def run_exact(self, kernel, global_size, span: int, *args):
        """Enqueue `kernel` over exactly `global_size` work-items, for a kernel with no bounds check: dimension 0
        in whole spans of `span` (a size PoCL can split into vectors), then its ragged end apart, at an offset.
        On CPUs PoCL runs neighbouring work-items as the lanes of a vector only where the kernel is straight-line
        code: a bounds check made it store lane by lane (cl/resize.cl, cl/activation.cl)."""
        whole, rest = global_size[0] - global_size[0] % span, tuple(global_size[1:])
        if whole:
            self.run(kernel, (whole, *rest), None, *args)
        if whole < global_size[0]:
            self.run(kernel, (global_size[0] - whole, *rest), None, *args, offset=(whole, *(0 for _ in rest)))

    def write(self, buffer, array: np.ndarray):
        """Upload a host array without waiting (the final blocking read orders everything after it)."""
        self.live = True  # host data: another forward would upload other values
        uploads = self.runtime.pinned
        if uploads is None or array.nbytes < pinned.SMALLEST:
            return self._issued(_cl().enqueue_copy(self.queue, buffer, array, is_blocking=False, wait_for=self._wait))
        events = uploads.write(self.queue, buffer, array, self._wait)
        self._current.extend(events)
        if self.levels:  # what follows waits for every chunk
            self._wait = self._done[self._op] = events
        return events[-1]

    def run_on_host(self, layer, inputs: list, outputs: list) -> None:
        """An operator with no OpenCL forward: download its inputs, run numpy, upload its outputs."""
        self.finish()
        rt = self.runtime
        host_out = [np.empty(t.shape, dtype=rt.computed(t.dtype)) for t in outputs]
        layer.forward_numpy([rt.loaded(t.numpy()) for t in inputs], host_out)
        for tensor, array in zip(outputs, host_out):
            if array.size:
                with np.errstate(over="ignore"):  # past half's range: ±inf, as on the device
                    array = array.astype(tensor.dtype, copy=False)
                _cl().enqueue_copy(self.queue, tensor.buffer, array, is_blocking=True)

    def finish(self) -> None:
        self.live = True  # a wait: what follows may depend on what the device computed
        self.queue.finish()

    def copy(self, dest, src, nbytes: int, dest_offset: int = 0, src_offset: int = 0):
        """A device-to-device copy, ordered like a kernel."""
        if self.recording is not None:
            self.recording.append(("copy", dest, src, int(nbytes), int(dest_offset), int(src_offset)))
        return self._issued(_cl().enqueue_copy(self.queue, dest, src, byte_count=int(nbytes),
                                               dst_offset=int(dest_offset), src_offset=int(src_offset),
                                               wait_for=self._wait))

    def kernel_seconds(self, op_name: str) -> float:
        """Device time of an operator's kernels (call after the queue has finished)."""
        return sum((e.profile.end - e.profile.start) * 1e-9 for e in self.events.get(op_name, ()))
