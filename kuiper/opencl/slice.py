"""Slicing and selecting on OpenCL (the ops: kuiper/layers/slice.py): the numpy index a layer reads its input
through is a strided view of the input (strided.sliced: an offset and a stride per dim, the step in the
stride), and each output is one strided copy (cl/copy.cl) out of such a view. torch.flip shares the forward
(kuiper/opencl/expand.py); torch.unbind copies one view per output."""

from __future__ import annotations

from kuiper.layers import slice as slicing
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import StridedCopy, dense, sliced


class OpenCLIndex(OpenCLLayer):
    """The output copied from the view `self.index` picks in the input."""

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        x, out = inputs[0], outputs[0]
        self.copier(q, out.shape, dense(out), sliced(x, self.index(x.shape)))


@opencl("Tensor.slice")
class Slice(OpenCLIndex, slicing.Slice):
    pass


@opencl("torch.narrow")
class Narrow(OpenCLIndex, slicing.Narrow):
    pass


@opencl("Tensor.select")
class Select(OpenCLIndex, slicing.Select):
    pass


@opencl("torch.unbind")
class Unbind(OpenCLLayer, slicing.Unbind):
    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        x = inputs[0]
        axis = self.dim % x.ndim
        for i, out in enumerate(outputs):
            self.copier(q, out.shape, dense(out), sliced(x, (slice(None),) * axis + (i,)))
