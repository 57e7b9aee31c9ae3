"""The channel and pixel shuffles on OpenCL (the ops: kuiper/layers/shuffle.py): the input seen with more dims
(`split`), those dims reordered (`axes`), is one strided-copy permute (StridedCopy.permute, cl/copy.cl) into
the output seen with the reordered dims."""

from __future__ import annotations

from kuiper.layers import shuffle
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.strided import StridedCopy


class OpenCLShuffle(OpenCLLayer):
    """One permute of the split input into the reordered output."""

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        split = self.split(inputs[0].shape)
        reordered = outputs[0].reshape(*(split[a] for a in self.axes))
        self.copier.permute(q, reordered, inputs[0].reshape(*split), self.axes)


@opencl("nn.ChannelShuffle", "F.channel_shuffle")
class ChannelShuffle(OpenCLShuffle, shuffle.ChannelShuffle):
    pass


@opencl("F.pixel_shuffle", "nn.PixelShuffle")
class PixelShuffle(OpenCLShuffle, shuffle.PixelShuffle):
    pass


@opencl("F.pixel_unshuffle", "nn.PixelUnshuffle")
class PixelUnshuffle(OpenCLShuffle, shuffle.PixelUnshuffle):
    pass
