"""ConvTranspose2d: the transpose of a convolution, as one GEMM followed by col2im.

Where a convolution gathers a kernel-sized patch into each output pixel, the transposed convolution
scatters each input pixel, weighted by the kernel, onto a kernel-sized patch of the output. That splits
into two steps per batch item:

1. GEMM: columns (Cout*kh*kw, H*W) = W^T (Cout*kh*kw, Cin) @ x (Cin, H*W) per group: the contribution of
   every input pixel to every kernel tap;
2. col2im: tap (i, j) of input pixel (y, x) lands on output pixel (y*stride + i*dilation, ...), so each tap
   is one strided slice of the output, and the taps are added into it one after another.

The scatter runs on an uncropped buffer; `padding` then crops that many pixels from each border, and
`output_padding` gives that many back at the bottom/right (rows past the scattered area hold only the bias).

On OpenCL the GEMM is kuiper/opencl/gemm.py's, for every group and batch item in one launch, and col2im
(cl/conv.cl) turns the scatter around: each output pixel gathers the taps that land on it, adds them in tap
order and adds the bias, so no two work-items write the same pixel and no atomics are needed.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.conv2d import ConvLayer, batched
from kuiper.opencl.gemm import Gemm, Matrix, column_chunks
from kuiper.layers.registry import register
from kuiper.opencl import round_up


@register("nn.ConvTranspose2d")
class ConvTranspose2d(ConvLayer):
    def __init__(self, op):
        super().__init__(op)
        (kh, kw), g = self.kernel_size, self.groups
        cin_g, cout_g = self.in_channels // g, self.out_channels // g
        self.padding = self.int_pair("padding", 0)
        self.output_padding = self.int_pair("output_padding", 0)
        for extra, s, d in zip(self.output_padding, self.stride, self.dilation):
            # PyTorch's rule: output_padding only picks among the output sizes one input size can come from
            if extra >= max(s, d):
                raise self.error(
                    f"output_padding={self.output_padding} must be smaller than stride={self.stride} "
                    f"or dilation={self.dilation}"
                )
        weight = self.weight("weight", (self.in_channels, cout_g, kh, kw))
        # per group, W^T: rows over (cout_g, kh, kw), so the GEMM's result reads as (Cout, kh, kw, H, W)
        self.w_gemm = np.ascontiguousarray(weight.reshape(g, cin_g, cout_g * kh * kw).transpose(0, 2, 1))

    def macs(self, input_shapes, output_shapes):
        # every input pixel meets every tap of its group's weights once
        (kh, kw), cout_g = self.kernel_size, self.out_channels // self.groups
        return int(np.prod(input_shapes[0], dtype=np.int64)) * cout_g * kh * kw

    def workspace_bytes(self, input_shapes):
        return math.prod(input_shapes[0][:-3]) * self.item_workspace_bytes(input_shapes)

    def item_workspace_bytes(self, input_shapes) -> int:
        """The GEMM's columns and col2im's uncropped output for one batch item."""
        h, w = input_shapes[0][-2:]
        out_hw = self.output_shapes(input_shapes)[0][-2:]
        return 4 * self.out_channels * (math.prod(self.kernel_size) * h * w + math.prod(self.uncropped((h, w), out_hw)))

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        self.check_input(shape)
        out_hw = []
        for size, k, s, d, p, extra in zip(shape[-2:], self.kernel_size, self.stride, self.dilation,
                                         self.padding, self.output_padding):
            length = (size - 1) * s - 2 * p + d * (k - 1) + extra + 1
            if length < 1:
                raise self.shape_error(f"input {shape[-2:]} gives an empty output: padding {self.padding} crops it all")
            out_hw.append(length)
        return [shape[:-3] + (self.out_channels, *out_hw)]

    def forward_numpy(self, inputs, outputs):
        x, out = batched(inputs[0]), batched(outputs[0])
        n, _, h, w = x.shape
        # 1. GEMM: every tap of every input pixel, (N, groups, Cout/g*kh*kw, H*W), all items and groups at once
        columns = np.matmul(self.w_gemm, x.reshape(n, self.groups, -1, h * w))
        # 2. col2im, onto zeros
        full = np.zeros((n, self.out_channels, *self.uncropped((h, w), out.shape[2:])), dtype=np.float32)
        self.col2im(columns.reshape(n, self.out_channels, *self.kernel_size, h, w), full, out)
        self.add_bias(out)

    def uncropped(self, in_hw: tuple, out_hw: tuple) -> tuple:
        """(height, width) of the buffer col2im scatters onto: tall and wide enough for every tap and for the
        cropped output, whichever reaches further."""
        return tuple(max((size - 1) * s + d * (k - 1) + 1, p + length) for size, length, k, s, d, p
                     in zip(in_hw, out_hw, self.kernel_size, self.stride, self.dilation, self.padding))

    def col2im(self, taps: np.ndarray, full: np.ndarray, out: np.ndarray) -> None:
        """Add tap (i, j) of input pixel (y, x), taps[..., :, i, j, y, x] (taps shaped (..., Cout, kh, kw, H, W)),
        onto pixel (y*sh + i*dh, x*sw + j*dw) of `full`, the zeroed uncropped output (..., Cout, full_h,
        full_w); then crop `padding` off it into `out`. Each tap is one strided slice of `full`."""
        h, w = taps.shape[-2:]
        (kh, kw), (sh, sw), (dh, dw), (ph, pw) = self.kernel_size, self.stride, self.dilation, self.padding
        for i, j in np.ndindex(kh, kw):
            full[..., i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (w - 1) * sw + 1:sw] += taps[..., i, j, :, :]
        out[...] = full[..., ph:ph + out.shape[-2], pw:pw + out.shape[-1]]

    # ---- OpenCL ---------------------------------------------------------------------------------------
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
                             b=Matrix(x.buffer, h * w, group=cin_g * h * w, item=cin * h * w,
                                      offset=first * cin * h * w),
                             groups=g, items=count, variant=variant)
            q.run(self.cl_col2im, (round_up(ho * wo, 16), self.out_channels, count), None,
                           y.buffer, first * self.out_channels * ho * wo, columns, self.cl_bias,
                           int(self.bias is not None), self.out_channels, self.out_channels // g, h, w, ho, wo,
                           *geometry)

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack) of the GEMM for these input shapes: one (Cout/g*kh*kw, Cin/g) @ (Cin/g, H*W) per group
        and item."""
        shape = shapes[0]
        return self.w_gemm.shape[1], shape[-2] * shape[-1], math.prod(shape[:-3]) * self.groups
