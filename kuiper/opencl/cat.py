"""torch.cat on OpenCL (the op: kuiper/layers/cat.py): every input is one block copy into its place in the
output (StridedCopy.blocks, cl/copy.cl). Seen as rows, one per index of the dims before `dim`, an input
fills a block of every row, the inputs side by side in order; where its blocks lie back to back in the output
too (a cat along dim 0), the copy is a single device-to-device copy. torch.stack uses the same forward
(kuiper/opencl/stack.py)."""

from __future__ import annotations

from kuiper.layers import cat
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import StridedCopy


class OpenCLCat(OpenCLLayer):
    """The inputs copied side by side along `self.dim` of the output."""

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        self.copier.blocks(q, outputs[0], inputs, self.dim % outputs[0].ndim, into_whole=True)


@opencl("torch.cat")
class Cat(OpenCLCat, cat.Cat):
    pass
