"""Conv2d: 2-D convolution as im2col followed by one matrix multiply (GEMM) per group.

Every output pixel of a convolution is the dot product of the weights with the input patch under the
kernel. Copying all those patches side by side, one column per output pixel (im2col), turns the whole
layer into a single matrix product

    out (Cout, Ho*Wo) = W (Cout, Cin*kh*kw) @ columns (Cin*kh*kw, Ho*Wo)

which BLAS runs near the machine's peak speed. With groups, the channels split into `groups` independent
blocks with one such product each; numpy's matmul runs the stack of them in one call. That includes
depthwise convolution (one input channel per group): measured here, those small GEMMs beat summing the
kh*kw shifted taps with elementwise numpy by 2-3x, so depthwise needs no path of its own.

A 1x1 kernel at stride 1 without padding skips the copy: the input already is the column matrix.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

#: im2col runs over bands of output rows whose column matrix is about this size, which bounds its memory
#: for any image size and keeps it in the core's L2 cache from the copy that writes it to the GEMM that
#: reads it (ResNet-18's convolutions: 1.2-1.3x faster than whole images with one BLAS thread, even with two).
COLUMN_BYTES = 1 << 20


def batched(array: np.ndarray) -> np.ndarray:
    """View an unbatched (C, H, W) tensor as (1, C, H, W); a batched one stays as it is."""
    return array.reshape((-1,) + array.shape[-3:])


class Scratch:
    """Work buffers kept from one forward to the next, reallocated only when the shape they need changes.

    New buffers are zero-filled, so a buffer whose border is never written keeps a zero border for free.
    """

    def __init__(self):
        self._buffers = {}

    def get(self, name: str, shape: tuple) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape != shape:
            buffer = self._buffers[name] = np.zeros(shape, dtype=np.float32)
        return buffer


class ConvLayer(Layer):
    """What Conv2d and ConvTranspose2d share: geometry parameters, input checks, bias and scratch."""

    def __init__(self, op):
        super().__init__(op)
        self.in_channels = self.positive_int("in_channels")
        self.out_channels = self.positive_int("out_channels")
        self.kernel_size = self.int_pair("kernel_size", minimum=1)
        self.stride = self.int_pair("stride", 1, minimum=1)
        self.dilation = self.int_pair("dilation", 1, minimum=1)
        self.groups = self.positive_int("groups", 1)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise self.error(
                f"in_channels={self.in_channels} and out_channels={self.out_channels} "
                f"must both be divisible by groups={self.groups}"
            )
        self.str_param("padding_mode", "zeros", choices=("zeros",))
        # shaped (Cout, 1, 1) so that it broadcasts over (N, Cout, H, W)
        bias = self.weight("bias", (self.out_channels,)) if self.bool_param("bias", True) else None
        self.bias = None if bias is None else bias.reshape(-1, 1, 1)
        self.scratch = Scratch()

    def positive_int(self, key: str, *default) -> int:
        value = self.int_param(key, *default)
        if value < 1:
            raise self.error(f"parameter '{key}' must be >= 1, got {value}")
        return value

    def int_pair(self, key: str, *default, minimum: int = 0) -> tuple:
        """A (height, width) parameter; a single int means the same value for both."""
        values = self.ints_param(key, 2, *default)
        if min(values) < minimum:
            raise self.error(f"parameter '{key}' must be >= {minimum}, got {values}")
        return values

    def check_input(self, shape: tuple) -> None:
        if len(shape) not in (3, 4) or shape[-3] != self.in_channels:
            raise self.shape_error(
                f"expects input (N, {self.in_channels}, H, W) or ({self.in_channels}, H, W), got {tuple(shape)}"
            )

    def add_bias(self, out: np.ndarray) -> None:
        if self.bias is not None:
            out += self.bias


@register("nn.Conv2d")
class Conv2d(ConvLayer):
    def __init__(self, op):
        super().__init__(op)
        (kh, kw), g = self.kernel_size, self.groups
        cin_g, cout_g = self.in_channels // g, self.out_channels // g
        self.pads = self._read_padding()  # ((top, bottom), (left, right))

        weight = self.weight("weight", (self.out_channels, cin_g, kh, kw))
        # row o of group g holds output channel g*cout_g + o, its columns run over (cin_g, kh, kw) like im2col's rows
        self.w_gemm = np.ascontiguousarray(weight.reshape(g, cout_g, cin_g * kh * kw))

        pointwise = (kh, kw) == (1, 1) and self.stride == (1, 1) and self.pads == ((0, 0), (0, 0))
        self._convolve = self._pointwise if pointwise else self._im2col

    def _read_padding(self) -> tuple:
        """Padding as ((top, bottom), (left, right)); 'same' puts the odd extra pixel bottom/right like PyTorch."""
        if not isinstance(self.param("padding", 0), str):
            ph, pw = self.int_pair("padding", 0)
            return (ph, ph), (pw, pw)
        if self.str_param("padding", choices=("same", "valid")) == "valid":
            return (0, 0), (0, 0)
        if self.stride != (1, 1):
            raise self.error(f"padding='same' needs stride 1, got stride={self.stride}")
        totals = (d * (k - 1) for k, d in zip(self.kernel_size, self.dilation))
        return tuple((t // 2, t - t // 2) for t in totals)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        self.check_input(shape)
        out_hw = []
        for size, (before, after), k, s, d in zip(shape[-2:], self.pads, self.kernel_size, self.stride, self.dilation):
            extent = d * (k - 1) + 1  # the dilated kernel's span
            if size + before + after < extent:
                raise self.shape_error(f"padded input {shape[-2:]} is smaller than the kernel's span {extent}")
            out_hw.append((size + before + after - extent) // s + 1)
        return [shape[:-3] + (self.out_channels, *out_hw)]

    def forward_numpy(self, inputs, outputs):
        out = batched(outputs[0])
        self._convolve(batched(inputs[0]), out)
        self.add_bias(out)

    # ---- the two ways to convolve -----------------------------------------------------------------
    def _pointwise(self, x, out):
        """1x1, stride 1, no padding: out[n, g] = W[g] @ x[n, g], all batch items and groups in one call."""
        n, g, hw = x.shape[0], self.groups, x.shape[2] * x.shape[3]
        np.matmul(self.w_gemm, x.reshape(n, g, -1, hw), out=out.reshape(n, g, -1, hw))

    def _im2col(self, x, out):
        """Column matrix, then GEMM, for one band of output rows at a time (see COLUMN_BYTES)."""
        windows = self._windows(x)  # (N, C, kh, kw, Ho, Wo), a view
        n, c, kh, kw, ho, wo = windows.shape
        g, k = self.groups, c * kh * kw
        rows = max(1, min(ho, COLUMN_BYTES // (4 * k * wo)))
        buffer = self.scratch.get("columns", (k * rows * wo,))
        out_pixels = out.reshape(n, g, -1, ho * wo)
        for item in range(n):
            for top in range(0, ho, rows):
                band = min(rows, ho - top)
                columns = buffer[:k * band * wo].reshape(c, kh, kw, band, wo)
                np.copyto(columns, windows[item, :, :, :, top:top + band])  # the one copy: im2col itself
                np.matmul(self.w_gemm, columns.reshape(g, -1, band * wo),
                          out=out_pixels[item, :, :, top * wo:(top + band) * wo])

    def _windows(self, x):
        """The kernel windows over the zero-padded input, shaped (N, C, kh, kw, Ho, Wo): strided views, no copy.

        Padding copies x into a cached buffer whose zero border is never written, so nothing is allocated.
        """
        (top, bottom), (left, right) = self.pads
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        if top or bottom or left or right:
            n, c, h, w = x.shape
            padded = self.scratch.get("padded", (n, c, h + top + bottom, w + left + right))
            padded[:, :, top:top + h, left:left + w] = x
            x = padded
        spans = sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
        # (N, C, positions_h, positions_w, span_h, span_w): keep every stride-th position, every dilation-th tap
        return spans[:, :, ::sh, ::sw, ::dh, ::dw].transpose(0, 1, 4, 5, 2, 3)
