"""The cutting layers on OpenCL (kuiper/layers/split.py's SplitLayer: torch.split, torch.tensor_split, and
torch.chunk of kuiper/layers/chunk.py): every output is one block copy out of the input (StridedCopy.blocks,
cl/copy.cl), the inverse of a cat. Seen as rows, one per index of the dims before `dim`, each piece is a block
of every row of the input; where the blocks lie back to back (any cut of a batch of 1), one device-to-device
copy."""

from __future__ import annotations

from kuiper.layers import chunk, split
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import StridedCopy


class OpenCLSplitLayer(OpenCLLayer):
    """The outputs copied out of the input, side by side along `self.dim`."""

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        self.copier.blocks(q, inputs[0], outputs, self.dim % inputs[0].ndim, into_whole=False)


@opencl("torch.split")
class Split(OpenCLSplitLayer, split.Split):
    pass


@opencl("torch.tensor_split")
class TensorSplit(OpenCLSplitLayer, split.TensorSplit):
    pass


@opencl("torch.chunk")
class Chunk(OpenCLSplitLayer, chunk.Chunk):
    pass
