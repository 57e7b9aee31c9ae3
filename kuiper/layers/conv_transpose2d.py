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

The OpenCL backend runs kuiper/opencl/conv_transpose2d.py: the same GEMM for every group and batch item in
one launch, then a col2im that gathers where this one scatters.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.conv2d import ConvLayer, batched
from kuiper.layers.registry import register


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

