"""Tensor.permute on OpenCL (the op: kuiper/layers/permute.py): one strided copy (cl/copy.cl) that walks the
output in order and reads the input with its strides reordered (StridedCopy.permute). The kernel walks at most
MAX_RANK dims once neighbouring ones are merged, and a permute of more dims may leave more: such a permute
keeps its numpy forward, on the host."""

from __future__ import annotations

from kuiper.layers import permute
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import MAX_RANK, StridedCopy


@opencl("Tensor.permute")
class Permute(OpenCLLayer, permute.Permute):
    @property
    def supports_opencl(self) -> bool:
        # cl/copy.cl walks at most MAX_RANK dims; a longer permute runs on the host
        return len(self.axes) <= MAX_RANK

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        self.copier.permute(q, outputs[0], inputs[0], self.axes)
