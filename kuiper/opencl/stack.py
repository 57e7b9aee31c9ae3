"""torch.stack on OpenCL (the op: kuiper/layers/stack.py): the cat of kuiper/opencl/cat.py, each input seen
with a size-1 dim at `dim`, so one block copy per input (cl/copy.cl)."""

from __future__ import annotations

from kuiper.layers import stack
from kuiper.opencl.cat import OpenCLCat
from kuiper.opencl.registry import opencl


@opencl("torch.stack")
class Stack(OpenCLCat, stack.Stack):
    def forward_opencl(self, q, inputs, outputs):
        axis = self.dim % outputs[0].ndim
        super().forward_opencl(q, [x.reshape(*x.shape[:axis], 1, *x.shape[axis:]) for x in inputs], outputs)
