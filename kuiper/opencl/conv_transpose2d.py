"""ConvTranspose2d on OpenCL (the layer itself: kuiper/layers/conv_transpose2d.py): the GEMM of
kuiper/opencl/gemm.py for every group and batch item in one launch, then col2im (cl/conv.cl).

col2im turns the reference's scatter around: each output pixel gathers the taps that land on it, adds them in
tap order and adds the bias, so no two work-items write the same pixel and no atomics are needed. The GEMM's
variant is chosen per input shape like any GEMM's (kuiper/opencl/tuning.py, its dimensions from `gemm_dims`);
a batch whose column matrix would be too large runs in chunks of items (column_chunks).
"""

from __future__ import annotations

import math

from kuiper.layers import conv_transpose2d
from kuiper.opencl.gemm import Gemm, Matrix, column_chunks
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up


@opencl("nn.ConvTranspose2d")
class ConvTranspose2d(OpenCLLayer, conv_transpose2d.ConvTranspose2d):
    def build_opencl(self, rt):
        self.gemm = Gemm(rt)
        self.variants = self.gemm.choices(self.gemm_dims, "conv.cl")
        self.cl_col2im = rt.kernel("conv.cl", "col2im")
        self.cl_weight = rt.upload(self.w_gemm)
        # without a bias col2im never reads its bias argument, but the argument needs a buffer
        self.cl_bias = rt.upload(self.bias.ravel()) if self.bias is not None else self.cl_weight

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if not y.size:  # OpenCL refuses an empty range
            return
        (h, w), (ho, wo), g = x.shape[-2:], y.shape[-2:], self.groups
        rows, cin_g, cin = self.w_gemm.shape[1], self.in_channels // g, self.in_channels
        geometry = (*self.kernel_size, *self.stride, *self.padding, *self.dilation)
        items = x.size // (cin * h * w)
        variant = self.variants.pick((x.shape,))
        columns, chunks = column_chunks(q, items, g * rows * h * w)
        for first, count in chunks:
            self.gemm(q, rows, h * w, cin_g,
                      c=Matrix(columns, h * w, group=rows * h * w, item=g * rows * h * w),
                      a=Matrix(self.cl_weight, cin_g, group=rows * cin_g),
                      b=Matrix(x.buffer, h * w, group=cin_g * h * w, item=cin * h * w, offset=first * cin * h * w),
                      groups=g, items=count, variant=variant)
            q.run(self.cl_col2im, (round_up(ho * wo, 16), self.out_channels, count), None,
                  y.buffer, first * self.out_channels * ho * wo, columns, self.cl_bias,
                  int(self.bias is not None), self.out_channels, self.out_channels // g, h, w, ho, wo, *geometry)

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack) of the GEMM for these input shapes: one (Cout/g*kh*kw, Cin/g) @ (Cin/g, H*W) per group
        and item."""
        shape = shapes[0]
        return self.w_gemm.shape[1], shape[-2] * shape[-1], math.prod(shape[:-3]) * self.groups
