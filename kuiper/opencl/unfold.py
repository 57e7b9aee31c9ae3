"""nn.Unfold on OpenCL (the layer: kuiper/layers/unfold.py): cl/conv.cl's im2col with one group writes the
output, which is Conv2d's column matrix, straight into the output buffer: whole output rows per work-item on
CPUs, a pixel each on GPUs, as Conv2d launches it."""

from __future__ import annotations

from kuiper.layers import unfold
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up


@opencl("nn.Unfold", "F.unfold")
class Unfold(OpenCLLayer, unfold.Unfold):
    def build_opencl(self, rt):
        self.cl_im2col = rt.kernel("conv.cl", "im2col")
        self.cl_whole_rows = rt.is_cpu

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if not y.size:
            return
        n, c, h, w = x.shape
        ho, wo = self.out_hw(x.shape)
        span = wo if self.cl_whole_rows else 1
        rows = c * self.kernel_size[0] * self.kernel_size[1]
        q.run(self.cl_im2col, (round_up(ho * -(-wo // span), 16), rows, n), None, y.buffer, x.buffer, 0, span, 1,
              c, h, w, ho, wo, *self.kernel_size, *self.stride, *self.padding, *self.dilation)
