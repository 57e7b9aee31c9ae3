"""A chain of moving operators on OpenCL (the chain itself: kuiper/layers/copy_chain.py): each of its copies is
one launch of cl/copy.cl, the copies between the first and the last writing the runtime's scratch."""

from __future__ import annotations

import math

from kuiper.layers import copy_chain
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.runtime import DeviceTensor
from kuiper.opencl.strided import StridedCopy, View, contiguous_strides

#: the work buffers (Enqueuer.scratch roles) of a chain that needs more than one copy, used in turn
SCRATCH_ROLES = ("copy chain a", "copy chain b")


class CopyChain(OpenCLLayer, copy_chain.CopyChain):
    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        source = inputs[0]
        copies = self.copies(source.shape)
        for k, (walk, shape) in enumerate(copies):
            target = outputs[0]
            if k < len(copies) - 1:
                nbytes = math.prod(shape) * source.dtype.itemsize
                target = DeviceTensor(source.runtime, q.scratch(SCRATCH_ROLES[k % 2], nbytes), shape, source.dtype)
            sizes, strides = walk.fine()
            self.copier(q, sizes, View(target, contiguous_strides(sizes)), View(source, strides, walk.offset))
            source = target
