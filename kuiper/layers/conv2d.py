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

On OpenCL (cl/conv.cl, cl/gemm.cl through kuiper/opencl/gemm.py) the same im2col and GEMM run for every
group and batch item in one launch, the bias added by the GEMM. With a gemm_cpu variant (the rule's on
CPUs) im2col writes the column matrix and the GEMM reads it; gemm_gpu variants (the rule's on GPUs) skip
it, reading im2col's entries straight from the input (implicit im2col), and so do gemm_cpu's "taps" variants
(the rule's on CPUs) from a padded copy of the input, split into the stride's phases. The variant is
chosen per input shape (kuiper/opencl/tuning.py). 1x1 stride-1 unpadded kernels are a plain GEMM on the input,
and depthwise convolution (one input channel per group) has a direct kernel of its own: its K = kh*kw is too
short for a GEMM to pay; on CPUs, so do grouped convolutions of few channels a group (ResNeXt, RegNet). A
residual sum and an activation fused after the convolution (kuiper/layers/fused.py) run in the kernel's
epilogue (`cl_epilogue`), as each output value is stored.

Both fast backends first drop the kernel rows and columns that read only padding at the input's size
(`cropped`): DeepLab's atrous 3x3 branches on a small map are 1x1 convolutions in disguise.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiper.layers.base import Layer
from kuiper.opencl.gemm import NO_BIAS, NO_EPILOGUE, ROW_BIAS, Gemm, Matrix, column_chunks
from kuiper.opencl.winograd import WinogradConv, applies as winograd_applies
from kuiper.layers.registry import register
from kuiper.opencl import round_up


#: on CPUs, grouped convolutions of up to this many input channels a group run cl/conv.cl's direct grouped_rows
#: rather than a stack of GEMMs of that thin a K
GROUPED_DIRECT_CHANNELS = 64
#: ... each work-item computing the first of these many of a group's output channels that divides it: they share
#: every load of the input (ResNeXt-like 3x3, 28x28, 32 groups, PoCL on Zen 4, ms, GEMMs / 1 / 4 / 8 a work-item:
#: 4 channels a group 0.81/0.30/0.13/-, 8: 0.87/1.44/0.36/0.40, 16: 4.5/5.3/2.5/1.8, 32: 13.5/15.4/9.6/4.3)
GROUPED_BLOCKS = (8, 4)
#: on CPUs, im2col gives each work-item a whole output row from this width on, else one pixel (im2col_pixels,
#: launched in whole spans of IM2COL_PIXEL_SPAN): cl/conv.cl has the crossover, 20 to 24 pixels on PoCL, Zen 4
IM2COL_ROW_WIDTH = 24
IM2COL_PIXEL_SPAN = 16
#: the taps variants' blocks run along output rows from this width on, below it along the padded grid
#: (Conv2d.on_grid). Either way did as well at ResNet-18's stem (112) and a 3x3 stride-2 layer at 147x147
#: (73), within this VM's noise (Intel's runtime, 2 threads of a Zen 4)
TAPS_MIN_ROW = 64
#: ... and along the grid only where it has at most this many columns per output pixel: the padding's columns
#: are computed too, and DeepLab-v3's 3x3 at dilation 12 on a 14x14 map (padding 12) makes a grid of 508 columns
#: for 196 pixels
TAPS_MAX_GRID = 2


def batched(array: np.ndarray) -> np.ndarray:
    """View an unbatched (C, H, W) tensor as (1, C, H, W); a batched one stays as it is."""
    return array.reshape((-1,) + array.shape[-3:])


class ConvLayer(Layer):
    """What Conv2d and ConvTranspose2d share: geometry parameters, input checks and the bias."""

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
    def __init__(self, op):
        super().__init__(op)
        (kh, kw), g = self.kernel_size, self.groups
        cin_g, cout_g = self.in_channels // g, self.out_channels // g
        self.pads = self._read_padding()  # ((top, bottom), (left, right))

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
        tap reads some pixel, or where dropping taps would leave uneven or negative padding."""
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
        from kuiper.runtime.operators import make_operator  # the runtime imports the layers: not at the top

        attrs = {key: attr.numpy() for key, attr in self.op.attrs.items()}
        attrs["weight"] = np.ascontiguousarray(weight)
        op = make_operator(self.op.type, self.op.name, {key: p.value for key, p in self.op.params.items()} | params,
                           attrs, input_shapes=[operand.shape for operand in self.op.input_operands])
        return type(self)(op)

    def forward_numpy(self, inputs, outputs):
        x, out = batched(inputs[0]), batched(outputs[0])
        n, g, (ho, wo) = x.shape[0], self.groups, out.shape[2:]
        (top, bottom), (left, right) = self.pads
        windows = self.kernel_windows(np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))))
        # (N, C, kh, kw, Ho, Wo) read as (N, groups, Cin/g*kh*kw, Ho*Wo): this reshape copies the windows into
        # the column matrix (im2col), then one stacked product does every batch item and group
        columns = windows.reshape(n, g, -1, ho * wo)
        np.matmul(self.w_gemm, columns, out=out.reshape(n, g, -1, ho * wo))
        self.add_bias(out)

    def kernel_windows(self, padded: np.ndarray) -> np.ndarray:
        """The column matrix as a view of the zero-padded input, shaped (N, C, kh, kw, Ho, Wo): entry
        [n, c, i, j, y, x] is padded[n, c, y*sh + i*dh, x*sw + j*dw], the pixel under tap (i, j) of the kernel
        placed at output pixel (y, x). Strides only, no copy."""
        n, c, h, w = padded.shape
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        ho, wo = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
        s_n, s_c, s_h, s_w = padded.strides
        return as_strided(padded, (n, c, kh, kw, ho, wo), (s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw),
                          writeable=False)

    # ---- OpenCL -----------------------------------------------------------------------------------
    #: the fused steps the GEMM applies as it stores the output (a KernelEpilogue, set by FusedLayer)
    cl_epilogue = NO_EPILOGUE

    #: the OpenCL forward runs a fused epilogue in the kernel that stores the output (GEMM, Winograd, depthwise)
    takes_opencl_epilogue = True

    def build_opencl(self, rt):
        self.cl_rt, self.cl_crops = rt, {}  # input size -> this layer cropped to its live taps, built, or None
        self.cl_bias = None if self.bias is None else rt.upload(self.bias.ravel())
        # one input channel per group (depthwise, with any channel multiplier): too thin for a GEMM; on CPUs, so
        # are groups of up to GROUPED_DIRECT_CHANNELS input channels (and a multiple of 4 outputs: GROUPED_BLOCKS)
        cin_g, cout_g = self.in_channels // self.groups, self.out_channels // self.groups
        self.cl_block = next((b for b in GROUPED_BLOCKS if cout_g % b == 0), None)
        self.cl_grouped = (rt.is_cpu and self.groups > 1 and 1 < cin_g <= GROUPED_DIRECT_CHANNELS
                           and self.cl_block is not None)
        if cin_g == 1 or self.cl_grouped:
            kh, kw = self.kernel_size
            # CPUs: a row per work-item, in vectors, from a padded copy of the input; GPUs: a pixel (cl/conv.cl)
            options = [f"-DKH={kh}", f"-DKW={kw}", f"-DSW={self.stride[1]}", *self.cl_epilogue.options]
            self.cl_pad = rt.kernel("conv.cl", "pad_planes", options) if rt.is_cpu else None
            self.cl_direct_group = rt.max_local_size()
            if self.cl_grouped:
                self.cl_direct = rt.kernel("conv.cl", "grouped_rows", [*options, f"-DOB={self.cl_block}"])
            else:
                self.cl_direct = rt.kernel("conv.cl", "depthwise_rows" if rt.is_cpu else "depthwise_conv2d",
                                              options)
            self.cl_weight = rt.upload(self.w_kernel)
            return
        self.cl_direct = None
        self.gemm = Gemm(rt, kernel_size=None if self.pointwise else self.kernel_size, epilogue=self.cl_epilogue)
        self.winograd = WinogradConv(rt, self) if winograd_applies(self) else None
        self.variants = self.gemm.choices(self.gemm_dims, "conv.cl", other=self.winograd)
        self.cl_weight = rt.upload(self.w_gemm)
        if not self.pointwise:  # for the GEMM variants that read a column matrix, not the images
            self.cl_im2col = rt.kernel("conv.cl", "im2col")
            self.cl_whole_rows = rt.is_cpu  # im2col's work-items: whole output rows on CPUs, pixels on GPUs
            self.cl_im2col_pixels = rt.kernel("conv.cl", "im2col_pixels") if rt.is_cpu else None
            # for the taps variants: pad_planes (built on first use), the taps table per input size
            self.cl_pad, self.cl_taps = None, {}

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if not y.size:  # OpenCL refuses an empty range
            return
        (h, w), (ho, wo), g = x.shape[-2:], y.shape[-2:], self.groups
        if (h, w) not in self.cl_crops:
            self.cl_crops[h, w] = self._cropped_opencl((h, w))
        if self.cl_crops[h, w] is not None:
            self.cl_crops[h, w].forward_opencl(q, inputs, outputs)
            return
        cin, cout = self.in_channels, self.out_channels
        items = x.size // (cin * h * w)
        (top, _), (left, _) = self.pads
        geometry = (*self.kernel_size, *self.stride, top, left, *self.dilation)
        if self.cl_direct is not None:
            self._direct_opencl(q, inputs, y, items)
            return
        cin_g, cout_g, k = cin // g, cout // g, self.w_gemm.shape[2]
        # inputs past the first are the tensors a fused epilogue adds
        bias = dict(bias=self.cl_bias, bias_mode=NO_BIAS if self.cl_bias is None else ROW_BIAS,
                    epilogue=self.cl_epilogue.args(inputs, y))
        weights = Matrix(self.cl_weight, k, group=cout_g * k)
        out = Matrix(y.buffer, ho * wo, group=cout_g * ho * wo, item=cout * ho * wo)
        variant = self.variants.pick(tuple(t.shape for t in inputs))
        if self.winograd is not None and variant in self.winograd.variants:
            variant(q, x, y, self.cl_bias, bias["epilogue"])
            return
        if variant in self.gemm.taps:
            self._taps_opencl(q, x, (ho, wo), k, items, c=out, a=weights, variant=variant, **bias)
            return
        implicit = variant in self.gemm.implicit
        # the GEMM reads B from the input itself when the input is the column matrix (1x1) or when it computes
        # im2col's entries on the fly (implicit); otherwise im2col writes the column matrix first
        if self.pointwise or implicit:
            image = (h, w, wo, *self.stride, top, left, *self.dilation) if implicit else ()
            images = Matrix(x.buffer, h * w, group=cin_g * h * w, item=cin * h * w)
            self.gemm(q, cout_g, ho * wo, k, c=out, a=weights, b=images, groups=g, items=items, image=image,
                      variant=variant, **bias)
            return
        span = wo if self.cl_whole_rows else 1
        # short rows on CPUs: a work-item per pixel, whose row its float arithmetic finds below 2^22 pixels
        pixels = self.cl_im2col_pixels is not None and wo < IM2COL_ROW_WIDTH and ho * wo < 1 << 22
        columns, chunks = column_chunks(q, items, g * k * ho * wo)
        for first, count in chunks:
            if pixels:
                q.run_exact(self.cl_im2col_pixels, (ho * wo, k, count * g), IM2COL_PIXEL_SPAN, columns,
                            x.buffer, first * cin * h * w, 1 / wo, cin_g, h, w, ho, wo, *geometry)
            else:
                q.run(self.cl_im2col, (round_up(ho * -(-wo // span), 16), k, count * g), None, columns,
                      x.buffer, first * cin * h * w, span, g, cin_g, h, w, ho, wo, *geometry)
            self.gemm(q, cout_g, ho * wo, k, c=out._replace(offset=first * cout * ho * wo), a=weights,
                                b=Matrix(columns, ho * wo, group=k * ho * wo, item=g * k * ho * wo),
                                groups=g, items=count, variant=variant, **bias)

    def padded_planes(self, in_hw: tuple, block: int = 1) -> tuple:
        """(rows, columns a phase) of cl/conv.cl's pad_planes copy of one input plane of size in_hw, padding
        included: the rows that every output row's windows reach, the columns of each of the stride's phases that
        an output row's windows reach, the row rounded up to whole blocks of `block` pixels."""
        (ho, wo) = self.output_shapes([(self.in_channels, *in_hw)])[0][-2:]
        (sh, sw), (dh, dw), (kh, kw) = self.stride, self.dilation, self.kernel_size
        return (ho - 1) * sh + (kh - 1) * dh + 1, round_up(wo, block) + (kw - 1) * dw // sw

    def phase_planes(self, in_hw: tuple, block: int = 1, row_phases: int = 1) -> tuple:
        """(rows, columns) of each phase plane of pad_planes' copy of one input plane of size in_hw, its rows
        split into row_phases (the taps variants: the row stride) and its columns into the column stride's, and
        the floats of the whole padded plane."""
        rows, phase_w = self.padded_planes(in_hw, block)
        rows = -(-rows // row_phases)
        return rows, phase_w, row_phases * self.stride[1] * rows * phase_w

    def taps(self, in_hw: tuple) -> np.ndarray:
        """For each row (c, i, j) of a group's im2col matrix, where its entry for output pixel (0, 0) lies in the
        group's pad_planes copy: tap (i, j) reads padded row i * dh of channel c, which is in row phase i * dh % sh,
        and column j * dw, in column phase j * dw % sw. Within that phase plane output pixel (oy, ox) reads oy
        rows and ox columns further on, as at stride 1 (cl/gemm.cl)."""
        (sh, sw), (dh, dw), (kh, kw) = self.stride, self.dilation, self.kernel_size
        rows, phase_w, _ = self.phase_planes(in_hw, row_phases=sh)
        c, i, j = np.indices((self.in_channels // self.groups, kh, kw)).reshape(3, -1)
        row, column = i * dh, j * dw
        phase = (c * sh + row % sh) * sw + column % sw
        return ((phase * rows + row // sh) * phase_w + column // sw).astype(np.int32)

    def _taps_opencl(self, q, x, out_hw: tuple, k: int, items: int, **gemm) -> None:
        """pad_planes, then the GEMM of a taps variant on the padded input: `gemm` holds the call's C, A, variant
        and bias."""
        h, w = x.shape[-2:]
        if self.cl_pad is None:
            options = [f"-DKH={self.kernel_size[0]}", f"-DKW={self.kernel_size[1]}", f"-DSW={self.stride[1]}"]
            self.cl_pad = self.cl_rt.kernel("conv.cl", "pad_planes", options)
        if (h, w) not in self.cl_taps:
            self.cl_taps[h, w] = self.cl_rt.upload(self.taps((h, w)))
        padded, _, phase_w, plane = self._pad_planes(q, x, items, row_phases=self.stride[0])
        cin, (ho, wo) = self.in_channels, out_hw
        if self.on_grid(wo):  # the padded grid as one row, its padding columns dropped (cl/gemm.cl)
            blocks = (1, self.taps_row(out_hw, phase_w), 0, phase_w, wo)
        else:  # output row by output row
            blocks = (ho, wo, phase_w, wo, wo)
        self.gemm(q, self.out_channels // self.groups, ho * wo, k, groups=self.groups, items=items,
                  b=Matrix(padded, 0, group=cin // self.groups * plane, item=cin * plane),
                  image=(self.cl_taps[h, w], *blocks), **gemm)

    def on_grid(self, out_w: int) -> bool:
        """Whether a taps variant's blocks run along the padded grid of a phase plane, rows and all, rather than
        along output rows: for rows shorter than TAPS_MIN_ROW, where blocks along each row would recompute many of
        its columns. Along long rows they store whole vectors only."""
        return out_w < TAPS_MIN_ROW

    def taps_row(self, out_hw: tuple, phase_w: int) -> int:
        """The columns a taps variant's blocks run along: on the padded grid its own, up to its last output pixel
        (its rows phase_w apart), else an output row's."""
        (ho, wo) = out_hw
        return (ho - 1) * phase_w + wo if self.on_grid(wo) else wo

    def _cropped_opencl(self, in_hw: tuple):
        """cropped(in_hw) built on this layer's runtime, with its fused epilogue; None where nothing is cropped."""
        layer = self.cropped(in_hw)
        if layer is not None:
            layer.cl_epilogue = self.cl_epilogue
            layer.build_opencl(self.cl_rt)
        return layer

    def _pad_planes(self, q, x, items: int, block: int = 1, row_phases: int = 1) -> tuple:
        """Enqueue pad_planes on input x into the runtime's "padded" scratch, its rows split into row_phases:
        returns that buffer, the rows and columns of a phase plane, and the floats of a padded input plane."""
        (h, w), (top, _), (left, _) = x.shape[-2:], *self.pads
        rows, phase_w = self.padded_planes((h, w), block)
        phase_rows, _, plane = self.phase_planes((h, w), block, row_phases)
        padded = q.scratch("padded", 4 * items * self.in_channels * plane)
        q.run(self.cl_pad, (rows, items * self.in_channels), None, padded, x.buffer, h, w, rows, phase_w, top, left,
              row_phases)
        return padded, phase_rows, phase_w, plane

    def _direct_opencl(self, q, inputs, y, items: int) -> None:
        """The direct kernels: depthwise_conv2d (GPUs), or pad_planes then depthwise_rows or grouped_rows (CPUs)."""
        x, (h, w), (ho, wo) = inputs[0], inputs[0].shape[-2:], y.shape[-2:]
        cin, cout = self.in_channels, self.out_channels
        (sh, sw), (dh, dw), (top, _), (left, _) = self.stride, self.dilation, *self.pads
        common = (self.cl_weight, self.cl_weight if self.cl_bias is None else self.cl_bias,
                  int(self.cl_bias is not None), *self.cl_epilogue.args(inputs, y), cout, cout // self.groups)
        if self.cl_pad is None:
            q.run(self.cl_direct, (round_up(wo, 8), ho, items * cout), None, y.buffer, x.buffer, *common, h, w,
                  ho, wo, sh, sw, top, left, dh, dw)
            return
        padded, padded_h, phase_w, _ = self._pad_planes(q, x, items, block=8)  # the kernels compute blocks of 8 pixels
        # a work-group per output plane: PoCL's own choice ran 32 planes of 112x112 about half as fast
        local = (ho, 1) if ho <= self.cl_direct_group else None
        if self.cl_grouped:  # common's last value, the multiplier, is cout_g here too
            q.run(self.cl_direct, (ho, items * cout // self.cl_block), local, y.buffer, padded, *common,
                  cin // self.groups, padded_h, phase_w, ho, wo, sh, dh, dw)
            return
        q.run(self.cl_direct, (ho, items * cout), local, y.buffer, padded, *common, padded_h, phase_w, ho, wo,
              sh, dh, dw)

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack, row) of the GEMM for these input shapes: one (Cout/g, K) @ (K, Ho*Wo) per group and item;
        the columns the taps variants' blocks run along (taps_row), or 0 where they do not apply: where the
        kernel's windows do not overlap (a 1x1 kernel, ViT's 16x16 patches at stride 16), the column matrix is no
        bigger than the input, nothing to save; where their offsets into a group's padded input would pass
        32 bits; and where the padded grid they would run along is mostly padding (TAPS_MAX_GRID)."""
        shape = shapes[0]
        ho, wo = self.output_shapes([shape])[0][-2:]
        _, phase_w, plane = self.phase_planes(shape[-2:], row_phases=self.stride[0])
        row = self.taps_row((ho, wo), phase_w)
        overlap = math.prod(self.kernel_size) > math.prod(self.stride)
        mostly_padding = self.on_grid(wo) and row > TAPS_MAX_GRID * ho * wo
        if not overlap or mostly_padding or self.in_channels // self.groups * plane >= 2 ** 31:
            row = 0
        return self.out_channels // self.groups, ho * wo, math.prod(shape[:-3]) * self.groups, row
