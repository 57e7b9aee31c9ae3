"""Conv2d: 2-D convolution the textbook way: zero padding, im2col, one matrix multiply (GEMM), bias.

Every output pixel of a convolution is the dot product of the weights with the input patch under the
kernel. Copying all those patches side by side, one column per output pixel (im2col), turns the whole
layer into a single matrix product

    out (Cout, Ho*Wo) = W (Cout, Cin*kh*kw) @ columns (Cin*kh*kw, Ho*Wo)

which BLAS runs near the machine's peak speed. With groups, the channels split into `groups` independent
blocks with one such product each, and every batch item has its own: numpy's matmul runs the whole
(N, groups) stack of them in one call. That includes depthwise convolution (one input channel per group).

This forward is the reference: short enough to check by eye, and the oracle the tests hold every faster
path to. The numpy backend runs kuiper/cpu/conv2d.py instead: the same product shared over kuiper's threads
band by band in reused buffers, no copy at all for 1x1 kernels, and Winograd's minimal filtering for 3x3.

The OpenCL backend runs kuiper/opencl/conv2d.py: the same im2col and GEMM (or a GEMM reading the input
itself) in one launch for every group and batch item, and direct kernels for depthwise convolution.

Both fast backends first drop the kernel rows and columns that read only padding at the input's size
(`cropped`): DeepLab's atrous 3x3 branches on a small map are 1x1 convolutions in disguise.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiper.core.operators import make_operator
from kuiper.layers.base import Layer
from kuiper.layers.pad import source_positions
from kuiper.layers.registry import register

#: the padding modes besides zeros: F.pad's names for them
EDGE_MODES = ("reflect", "replicate", "circular")


def batched(array: np.ndarray) -> np.ndarray:
    """View an unbatched (C, H, W) tensor as (1, C, H, W); a batched one stays as it is."""
    return array.reshape((-1,) + array.shape[-3:])


class ConvLayer(Layer):
    """What Conv2d and ConvTranspose2d share: geometry parameters, input checks and the bias."""

    #: the padding_mode values the layer computes
    padding_modes = ("zeros",)

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
        self.padding_mode = self.str_param("padding_mode", "zeros", choices=self.padding_modes)
        # shaped (Cout, 1, 1) so that it broadcasts over (N, Cout, H, W); a copy for alignment (see Conv2d.w_gemm)
        bias = self.weight("bias", (self.out_channels,)) if self.bool_param("bias", True) else None
        self.bias = None if bias is None else np.array(bias).reshape(-1, 1, 1)

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
    padding_modes = ("zeros",) + EDGE_MODES

    def __init__(self, op):
        super().__init__(op)
        (kh, kw), g = self.kernel_size, self.groups
        cin_g, cout_g = self.in_channels // g, self.out_channels // g
        self.pads = self._read_padding()  # ((top, bottom), (left, right))
        # reflect, replicate or circular padding (pnnx folds TResNet's reflect pad into its blur convolution):
        # the input is padded first, by F.pad's rules, and the convolution itself pads nothing
        self.edge_pads = None
        if self.padding_mode != "zeros":
            self.edge_pads, self.pads = self.pads, ((0, 0), (0, 0))

        self.w_kernel = self.weight("weight", (self.out_channels, cin_g, kh, kw))
        # row o of group g holds output channel g*cout_g + o, its columns run over (cin_g, kh, kw) like im2col's rows.
        # Always a copy: weights viewed in the .bin file can sit off 4-byte boundaries, and numpy copies such an
        # array into an aligned temporary on every matmul (ResNet-18's last convolutions: +70%)
        self.w_gemm = np.array(self.w_kernel.reshape(g, cout_g, cin_g * kh * kw))
        # 1x1, stride 1, unpadded: the input already is the column matrix, no im2col needed
        self.pointwise = (kh, kw) == (1, 1) and self.stride == (1, 1) and self.pads == ((0, 0), (0, 0))

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

    def macs(self, input_shapes, output_shapes):
        # each output element is a dot product over one group's (Cin/g, kh, kw) window
        (kh, kw) = self.kernel_size
        return math.prod(output_shapes[0]) * (self.in_channels // self.groups) * kh * kw

    def workspace_bytes(self, input_shapes):
        # the zero-padded input and the column matrix
        n, c, h, w = (math.prod(input_shapes[0][:-3]), *input_shapes[0][-3:])
        (top, bottom), (left, right) = self.pads
        ho, wo = self.output_shapes(input_shapes)[0][-2:]
        return 4 * n * c * ((h + top + bottom) * (w + left + right) + math.prod(self.kernel_size) * ho * wo)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        self.check_input(shape)
        if self.edge_pads is not None:
            for axis, (size, (before, after)) in enumerate(zip(shape[-2:], self.edge_pads)):
                limit = size - 1 if self.padding_mode == "reflect" else size
                if max(before, after) > limit or size < 1:
                    raise self.shape_error(f"padding_mode={self.padding_mode} cannot pad dim {axis - 2} of a "
                                           f"{shape} input by {(before, after)}")
            shape = shape[:-2] + tuple(n + a + b for n, (a, b) in zip(shape[-2:], self.edge_pads))
        out_hw = []
        for size, (before, after), k, s, d in zip(shape[-2:], self.pads, self.kernel_size, self.stride, self.dilation):
            extent = d * (k - 1) + 1  # the dilated kernel's span
            if size + before + after < extent:
                raise self.shape_error(f"padded input {shape[-2:]} is smaller than the kernel's span {extent}")
            out_hw.append((size + before + after - extent) // s + 1)
        return [shape[:-3] + (self.out_channels, *out_hw)]

    # ---- taps that only ever read padding ---------------------------------------------------------
    def live_taps(self, in_hw: tuple) -> tuple:
        """Per axis, [first, stop) of the kernel's taps that read an input pixel, not padding, for at least one
        output pixel of an input of in_hw. Tap t of output o reads o * stride - pad + t * dilation."""
        live = []
        out_hw = self.output_shapes([(self.in_channels, *in_hw)])[0][-2:]
        for size, out, (before, _), k, s, d in zip(in_hw, out_hw, self.pads, self.kernel_size, self.stride,
                                                     self.dilation):
            # the first output whose read is >= 0, then whether that read is inside the input
            taps = [t for t in range(k) if (o := max(0, -(-(before - t * d) // s))) < out
                    and o * s - before + t * d < size]
            live.append((taps[0], taps[-1] + 1) if taps else (0, k))
        return tuple(live)

    def cropped(self, in_hw: tuple) -> Conv2d | None:
        """This convolution, for inputs of in_hw, without the kernel rows and columns that read only padding:
        the same output from fewer multiplies. DeepLab's atrous branches are the case: at dilation 24 and 36 on
        a 14x14 map only the centre tap of the 3x3 kernel reaches the map, a 1x1 convolution. None where every
        tap reads some pixel, or where dropping taps would leave uneven or negative padding (or the input is
        padded by a mode other than zeros, before the convolution)."""
        if self.edge_pads is not None:
            return None
        live = self.live_taps(in_hw)
        if all(stop - first == k for (first, stop), k in zip(live, self.kernel_size)):
            return None
        pads = []
        for (first, stop), (before, after), k, d in zip(live, self.pads, self.kernel_size, self.dilation):
            # the same output size: the padding shrinks by what the dropped taps spanned on each side
            top, bottom = before - first * d, after - (k - stop) * d
            if top != bottom or top < 0:
                return None
            pads.append(top)
        (i0, i1), (j0, j1) = live
        return self._rebuilt(self.w_kernel[:, :, i0:i1, j0:j1], kernel_size=[i1 - i0, j1 - j0], padding=pads)

    def undilated(self) -> Conv2d:
        """This convolution's kernel with its taps side by side and no padding. A dilated convolution at stride 1
        is this one run on a mosaic of its input's phases, each framed by its share of the padding (the numpy
        backend's "phases" variant, kuiper/cpu/conv2d.py): at dilation d, input row a + d*i is row i of phase a."""
        return self._rebuilt(self.w_kernel, dilation=[1, 1], padding=[0, 0])

    def _rebuilt(self, weight: np.ndarray, **params) -> Conv2d:
        """A layer of this class for this operator with `params` changed and `weight` for its kernel."""

        attrs = {key: attr.numpy() for key, attr in self.op.attrs.items()}
        attrs["weight"] = np.ascontiguousarray(weight)
        op = make_operator(self.op.type, self.op.name, {key: p.value for key, p in self.op.params.items()} | params,
                           attrs, input_shapes=[operand.shape for operand in self.op.input_operands])
        return type(self)(op)

    def edge_padded(self, x: np.ndarray) -> np.ndarray:
        """x padded by padding_mode (reflect, replicate, circular), as F.pad pads."""
        rows, cols = (source_positions(self.padding_mode, n, *pair) for n, pair in zip(x.shape[-2:], self.edge_pads))
        return x[..., rows[:, None], cols]

    def forward_numpy(self, inputs, outputs):
        x, out = batched(inputs[0]), batched(outputs[0])
        if self.edge_pads is not None:
            x = self.edge_padded(x)
        n, g, (ho, wo) = x.shape[0], self.groups, out.shape[2:]
        (top, bottom), (left, right) = self.pads
        windows = self.kernel_windows(np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))))
        # (N, C, kh, kw, Ho, Wo) read as (N, groups, Cin/g*kh*kw, Ho*Wo): this reshape copies the windows into
        # the column matrix (im2col), then one stacked product does every batch item and group
        columns = windows.reshape(n, g, -1, ho * wo)
        np.matmul(self.w_gemm, columns, out=out.reshape(n, g, -1, ho * wo))
        self.add_bias(out)

    def kernel_windows(self, padded: np.ndarray) -> np.ndarray:
        return kernel_windows(padded, self.kernel_size, self.stride, self.dilation)


def kernel_windows(padded: np.ndarray, kernel_size: tuple, stride: tuple, dilation: tuple) -> np.ndarray:
    """The column matrix as a view of the zero-padded input, shaped (N, C, kh, kw, Ho, Wo): entry
    [n, c, i, j, y, x] is padded[n, c, y*sh + i*dh, x*sw + j*dw], the pixel under tap (i, j) of the kernel
    placed at output pixel (y, x). Strides only, no copy. nn.Unfold's output is this, reshaped."""
    n, c, h, w = padded.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, stride, dilation
    ho, wo = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    s_n, s_c, s_h, s_w = padded.strides
    return as_strided(padded, (n, c, kh, kw, ho, wo), (s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw),
                      writeable=False)
