"""Unfold (nn.Unfold, F.unfold): every kernel-sized patch of an image as a column, (N, C, H, W) ->
(N, C * kh * kw, L), L the number of places the kernel takes (row by row), the rows ordered channel by
channel and tap by tap within a channel. That is exactly Conv2d's column matrix (im2col) of one group, so
the forward is conv2d.kernel_windows reshaped, and the OpenCL forward (kuiper/opencl/unfold.py) is
cl/conv.cl's im2col. TNT cuts its pixel-level patches with it.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.conv2d import kernel_windows
from kuiper.layers.registry import register


@register("nn.Unfold", "F.unfold")
class Unfold(Layer):
    def __init__(self, op):
        super().__init__(op)
        self.kernel_size = self.pair("kernel_size", minimum=1)
        self.dilation = self.pair("dilation", 1, minimum=1)
        self.padding = self.pair("padding", 0, minimum=0)
        self.stride = self.pair("stride", 1, minimum=1)

    def pair(self, key: str, *default, minimum: int) -> tuple:
        values = self.ints_param(key, 2, *default)
        if min(values) < minimum:
            raise self.error(f"parameter '{key}' must be >= {minimum}, got {values}")
        return values

    def out_hw(self, shape: tuple) -> tuple:
        """The places the kernel takes along H and W of a (N, C, H, W) input."""
        if len(shape) != 4:
            raise self.shape_error(f"expects input (N, C, H, W), got {shape}")
        sizes = []
        for size, k, s, p, d in zip(shape[-2:], self.kernel_size, self.stride, self.padding, self.dilation):
            span = d * (k - 1) + 1
            if size + 2 * p < span:
                raise self.shape_error(f"padded input {shape[-2:]} is smaller than the kernel's span {span}")
            sizes.append((size + 2 * p - span) // s + 1)
        return tuple(sizes)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        ho, wo = self.out_hw(shape)
        return [(shape[0], shape[1] * math.prod(self.kernel_size), ho * wo)]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        (ph, pw) = self.padding
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        np.copyto(out, kernel_windows(padded, self.kernel_size, self.stride, self.dilation).reshape(out.shape))
