"""Index inputs read back on the host: token ids and positions, checked as the reference layers check them.

An embedding's ids and the attention's positions are indices: a wrong one must be the caller's error, as on
numpy, not a silent read of another row or of a cache position never written. Checking them takes their values
on the host, so a forward that needs them downloads the tensor, after waiting for the queue (`q.finish()`: on
the levelized schedule's out-of-order queue too). They are a few int64s; the cost is the wait, which stops the
host from enqueueing ahead of the device for a moment.

Every attention layer of a decoder reads the same positions tensor, so one download serves them all: the values
are kept for the Enqueuer of the forward (a new one each forward), by tensor. The graph hands every consumer of
an operand the very same DeviceTensor, and no operator writes a tensor that is still to be read, so the values
stay right for the whole forward.
"""

from __future__ import annotations

import weakref

import numpy as np

from kuiper.opencl.enqueuer import Enqueuer
from kuiper.opencl.runtime import DeviceTensor

#: the OpenCL C type of each integer dtype, for kernels that read indices on the device (built with -DINDEX=...)
INDEX_TYPES = {np.dtype(t): name for t, name in [
    (np.int64, "long"), (np.int32, "int"), (np.int16, "short"), (np.int8, "char"),
    (np.uint64, "ulong"), (np.uint32, "uint"), (np.uint16, "ushort"), (np.uint8, "uchar")]}

#: Enqueuer -> {id(tensor): (tensor, its values)}, forgotten with the Enqueuer
_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def host_indices(q: Enqueuer, tensor: DeviceTensor) -> np.ndarray:
    """The values of an integer DeviceTensor on the host, downloaded once per forward (read-only)."""
    read = _READ.setdefault(q, {})
    entry = read.get(id(tensor))
    if entry is None or entry[0] is not tensor:  # the id of a tensor let go may come back on another one
        q.finish()
        entry = read[id(tensor)] = (tensor, tensor.numpy())
        entry[1].flags.writeable = False
    return entry[1]


class IndexKernels:
    """One kernel of a file built once per integer dtype of the indices it reads (-DINDEX=long, int, ...): an
    index input may be any integer tensor, as on numpy, and int64 is only the usual one."""

    def __init__(self, rt, file: str, name: str, options: list = ()):
        self.rt, self.file, self.name, self.options = rt, file, name, list(options)
        self.kernels = {}

    def __getitem__(self, dtype):
        kernel = self.kernels.get(dtype)
        if kernel is None:  # rt.kernel hashes the source each call: fetched once per dtype, not per forward
            kernel = self.kernels[dtype] = self.rt.kernel(self.file, self.name,
                                                          [f"-DINDEX={INDEX_TYPES[dtype]}", *self.options])
        return kernel
