"""torch.transpose on OpenCL (the op: kuiper/layers/transpose.py): the permute that swaps the two axes, one
strided copy (StridedCopy.permute, cl/copy.cl). Merged, a swap of two axes walks at most 5 dims whatever the
rank, so unlike a permute it always runs on the device."""

from __future__ import annotations

from kuiper.layers import transpose
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import StridedCopy


@opencl("torch.transpose")
class Transpose(OpenCLLayer, transpose.Transpose):
    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        # merged, the swap walks at most 5 dims whatever the rank
        self.copier.permute(q, outputs[0], inputs[0], self.axes(inputs[0].ndim))
