"""Repeating and reversing on OpenCL (the ops: kuiper/layers/expand.py): each is one strided copy (cl/copy.cl)
from a view of the input, with no kernel of its own.

- expand, expand_as: the input read with stride 0 along the dims it broadcasts (added dims, size-1 dims that
  grow);
- repeat, tile: the output walked as (copy, element) pairs per dim, the copy index with stride 0 in the input:
  twice the dims, so a 4-d repeat interleaves 8, past what the kernel walks at once (the copy then loops over
  its outer dims, kuiper/opencl/strided.py);
- flip: the input read from the last element of each flipped dim with a negative stride, through the slices'
  forward (kuiper/opencl/slice.py)."""

from __future__ import annotations

from kuiper.layers import expand
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.slice import OpenCLIndex
from kuiper.opencl.strided import StridedCopy, View, contiguous_strides, dense


class OpenCLBroadcast(OpenCLLayer):
    """The input read with stride 0 along the dims it is broadcast along."""

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        x, out = inputs[0], outputs[0]
        # an added dim or a size-1 dim that grows reads the same elements again: stride 0
        strides = (0,) * (out.ndim - x.ndim) + tuple(
            0 if n == 1 else s for n, s in zip(x.shape, contiguous_strides(x.shape)))
        self.copier(q, out.shape, dense(out), View(x, strides))


@opencl("Tensor.expand")
class Expand(OpenCLBroadcast, expand.Expand):
    pass


@opencl("Tensor.expand_as")
class ExpandAs(OpenCLBroadcast, expand.ExpandAs):
    pass


class OpenCLRepeat(OpenCLLayer):
    """np.tile as one copy: per output dim, a copy index (stride 0 in the input) and an element index."""

    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)

    def forward_opencl(self, q, inputs, outputs):
        x, out = inputs[0], outputs[0]
        shape = (1,) * (out.ndim - x.ndim) + x.shape
        source = (0,) * (out.ndim - x.ndim) + contiguous_strides(x.shape)
        # each output dim walked as (copy, element): copies lie n elements apart in the output, all read the input
        sizes, dst, src = [], [], []
        for m, n, out_stride, in_stride in zip(out.shape, shape, contiguous_strides(out.shape), source):
            sizes += [m // n if n else 0, n]
            dst += [n * out_stride, out_stride]
            src += [0, in_stride]
        self.copier(q, tuple(sizes), View(out, tuple(dst)), View(x, tuple(src)))


@opencl("Tensor.repeat")
class Repeat(OpenCLRepeat, expand.Repeat):
    pass


@opencl("torch.tile")
class Tile(OpenCLRepeat, expand.Tile):
    pass


@opencl("torch.flip")
class Flip(OpenCLIndex, expand.Flip):
    pass
