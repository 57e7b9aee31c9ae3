"""Conv2d on OpenCL (the layer itself: kuiper/layers/conv2d.py): im2col and GEMM in one launch for every group
and batch item (cl/conv.cl, cl/gemm.cl through kuiper/opencl/gemm.py), the bias added by the GEMM.

The kernels, and which one a layer runs:

* depthwise convolution (one input channel per group) has a direct kernel of its own, its K = kh*kw too short
  for a GEMM to pay: on GPUs depthwise_conv2d, a pixel per work-item; on CPUs depthwise_rows, a row per
  work-item in vectors, read from the input, or where rows are too narrow for that (`unpadded_rows`) pad_planes,
  then depthwise_padded. On CPUs grouped convolutions of few channels a group (ResNeXt, RegNet) run
  grouped_rows the same way, each work-item computing several output channels (GROUPED_DIRECT_CHANNELS,
  GROUPED_BLOCKS);
* 1x1 stride-1 unpadded kernels are a plain GEMM on the input, which already is the column matrix;
* everything else is a GEMM variant chosen per input shape (kuiper/opencl/tuning.py, the rule's dimensions
  from `gemm_dims`). A gemm_cpu variant (the rule's on CPUs) reads the column matrix im2col wrote; gemm_gpu
  variants (the rule's on GPUs) skip it, reading im2col's entries straight from the input (implicit im2col),
  and so do gemm_cpu's "taps" variants (the rule's on CPUs where the kernel's windows overlap) from
  pad_planes' padded copy of the input, split into the stride's phases: no column matrix is written and
  read back. Winograd's F(m x m, 3x3) (kuiper/opencl/winograd.py) joins the variants of 3x3 stride-1
  layers, undilated and ungrouped, and on CPUs conv_pixels (kuiper/opencl/conv_pixels.py) those of every
  ungrouped layer with a kernel wider than 1x1: the same padded copy, the product turned round (output pixels
  by output channels), which the rule takes where the taps variants would run and for 3x3 stride-1 layers of
  few Winograd tiles.

A residual sum and an activation fused after the convolution (kuiper/opencl/fused.py) run in the kernel's
epilogue (`cl_epilogue`), as each output value is stored. Before any of it the layer drops the kernel rows and
columns that read only padding at the input's size (`cropped`, kuiper/layers/conv2d.py).
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers import conv2d
from kuiper.opencl.gemm import NO_BIAS, NO_EPILOGUE, ROW_BIAS, Gemm, Matrix, column_chunks
from kuiper.opencl.conv_pixels import PixelConv
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up
from kuiper.opencl.winograd import WinogradConv, applies as winograd_applies

#: on CPUs, grouped convolutions of up to this many input channels a group run cl/conv.cl's direct grouped_rows
#: rather than a stack of GEMMs of that thin a K
GROUPED_DIRECT_CHANNELS = 64
#: ... each work-item computing the first of these many of a group's output channels that divides it: they share
#: every load of the input (docs/tuning.md has the measurement)
GROUPED_BLOCKS = (8, 4)
#: on CPUs, im2col gives each work-item a whole output row from this width on, else one pixel (im2col_pixels,
#: launched in whole spans of IM2COL_PIXEL_SPAN): the crossover of the two (docs/tuning.md)
IM2COL_ROW_WIDTH = 24
IM2COL_PIXEL_SPAN = 16
#: the taps variants' blocks run along output rows from this width on, below it along the padded grid
#: (Conv2d.on_grid): short rows leave a row's blocks mostly empty, while on wide rows both ways do as well
TAPS_MIN_ROW = 64
#: ... and along the grid only where it has at most this many columns per output pixel: the padding's columns
#: are computed too, and DeepLab-v3's 3x3 at dilation 12 on a 14x14 map (padding 12) makes a grid of 508 columns
#: for 196 pixels
TAPS_MAX_GRID = 2
#: depthwise_rows reads the input itself at column strides up to this (its vectors' lanes: 1 or 2 columns apart),
UNPADDED_MAX_STRIDE = 2
#: ... where at most this many pixels a row fall outside its vector blocks, each computed alone with every tap
#: tested: MobileNet's 3x3 layers at any width, not 5x5 ones on 14x14 or 7x7 maps (docs/tuning.md)
UNPADDED_EDGE_PIXELS = 2
#: the pixels of depthwise_rows' vector blocks (DW in cl/conv.cl)
ROW_BLOCK = 8


@opencl("nn.Conv2d")
class Conv2d(OpenCLLayer, conv2d.Conv2d):
    #: the fused steps the GEMM applies as it stores the output (a KernelEpilogue, set by FusedLayer)
    cl_epilogue = NO_EPILOGUE

    #: the OpenCL forward runs a fused epilogue in the kernel that stores the output (GEMM, Winograd, depthwise)
    takes_opencl_epilogue = True

    @property
    def supports_opencl(self) -> bool:
        # reflect, replicate or circular padding (TResNet's blur, a few layers) runs on the host
        return self.edge_pads is None

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
            # CPUs: a row per work-item, in vectors, from a padded copy of the input or, depthwise where rows are
            # wide enough, from the input itself; GPUs: a pixel (cl/conv.cl)
            options = [f"-DKH={kh}", f"-DKW={kw}", f"-DSW={self.stride[1]}", *self.cl_epilogue.options]
            self.cl_pad = rt.kernel("conv.cl", "pad_planes", options) if rt.is_cpu else None
            self.cl_direct_group = rt.max_local_size()
            self.cl_unpadded = None
            if self.cl_grouped:
                self.cl_direct = rt.kernel("conv.cl", "grouped_rows", [*options, f"-DOB={self.cl_block}"])
            else:
                self.cl_direct = rt.kernel("conv.cl", "depthwise_padded" if rt.is_cpu else "depthwise_conv2d",
                                           options)
                if rt.is_cpu and self.stride[1] <= UNPADDED_MAX_STRIDE:
                    self.cl_unpadded = rt.kernel("conv.cl", "depthwise_rows", options)
            self.cl_weight = rt.upload(self.w_kernel)
            return
        self.cl_direct = None
        self.gemm = Gemm(rt, kernel_size=None if self.pointwise else self.kernel_size, epilogue=self.cl_epilogue)
        self.winograd = WinogradConv(rt, self) if winograd_applies(self) else None
        # output pixels by output channels on CPUs, for ungrouped layers that have taps (pad_planes' copy)
        self.pixels = PixelConv(rt, self) if rt.is_cpu and self.groups == 1 and not self.pointwise else None
        others = [way for way in (self.pixels, self.winograd) if way is not None]
        self.variants = self.gemm.choices(self.gemm_dims, "conv.cl", others=others)
        # rows of 16-byte multiples, which tensor-core variants copy 16 bytes at a time (the stem's 3 x 7 x 7)
        k, vec = self.w_gemm.shape[2], 16 // rt.storage.itemsize
        self.cl_ld = -(-k // vec) * vec if self.gemm.mma else k
        self.cl_weight = rt.upload(np.pad(self.w_gemm, ((0, 0), (0, 0), (0, self.cl_ld - k))))
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
        weights = Matrix(self.cl_weight, self.cl_ld, group=cout_g * self.cl_ld)
        out = Matrix(y.buffer, ho * wo, group=cout_g * ho * wo, item=cout * ho * wo)
        variant = self.variants.pick(tuple(t.shape for t in inputs))
        if variant.launch in (self.winograd, self.pixels):  # Winograd or conv_pixels: kernels of their own
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

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack, row) of the GEMM for these input shapes: one (Cout/g, K) @ (K, Ho*Wo) per group and item;
        the columns the taps variants' blocks run along (taps_row), or 0 where they do not apply: where the
        kernel's windows do not overlap (a 1x1 kernel, ViT's 16x16 patches at stride 16), the column matrix is no
        bigger than the input, nothing to save; where their offsets into a group's padded input would pass
        32 bits; and where the padded grid they would run along is mostly padding (TAPS_MAX_GRID)."""
        shape = shapes[0]
        ho, wo = self.output_shapes([shape])[0][-2:]
        _, phase_w, _ = self.phase_planes(shape[-2:], row_phases=self.stride[0])
        row = self.taps_row((ho, wo), phase_w)
        overlap = math.prod(self.kernel_size) > math.prod(self.stride)
        mostly_padding = self.on_grid(wo) and row > TAPS_MAX_GRID * ho * wo
        if not overlap or mostly_padding or not self.taps_fit(shape[-2:]):
            row = 0
        return self.out_channels // self.groups, ho * wo, math.prod(shape[:-3]) * self.groups, row

    def _cropped_opencl(self, in_hw: tuple):
        """cropped(in_hw) built on this layer's runtime, with its fused epilogue; None where nothing is cropped."""
        layer = self.cropped(in_hw)
        if layer is not None:
            layer.cl_epilogue = self.cl_epilogue
            layer.build_opencl(self.cl_rt)
        return layer

    # ---- pad_planes: a padded copy of the input, split into the stride's phases (taps, direct on CPUs) ----
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

    # ---- the taps variants: the GEMM reads im2col's entries from pad_planes' copy ---------------------------
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

    def padded_taps(self, q, x, items: int) -> tuple:
        """Enqueue pad_planes on input x, its rows split into the stride's phases, for a taps variant or
        conv_pixels: returns that copy, the taps table for x's size (uploaded once), the columns of a phase
        plane and the floats of a padded input plane."""
        h, w = x.shape[-2:]
        if self.cl_pad is None:
            options = [f"-DKH={self.kernel_size[0]}", f"-DKW={self.kernel_size[1]}", f"-DSW={self.stride[1]}"]
            self.cl_pad = self.cl_rt.kernel("conv.cl", "pad_planes", options)
        if (h, w) not in self.cl_taps:
            self.cl_taps[h, w] = self.cl_rt.upload(self.taps((h, w)))
        padded, _, phase_w, plane = self._pad_planes(q, x, items, row_phases=self.stride[0])
        return padded, self.cl_taps[h, w], phase_w, plane

    def taps_fit(self, in_hw: tuple) -> bool:
        """Whether the taps table's 32-bit offsets reach all of one group's pad_planes copy of an input of size
        in_hw: the limit of the taps variants and of conv_pixels, which read it."""
        return self.in_channels // self.groups * self.phase_planes(in_hw, row_phases=self.stride[0])[2] < 2 ** 31

    def _taps_opencl(self, q, x, out_hw: tuple, k: int, items: int, **gemm) -> None:
        """pad_planes, then the GEMM of a taps variant on the padded input: `gemm` holds the call's C, A, variant
        and bias."""
        padded, taps, phase_w, plane = self.padded_taps(q, x, items)
        cin, (ho, wo) = self.in_channels, out_hw
        if self.on_grid(wo):  # the padded grid as one row, its padding columns dropped (cl/gemm.cl)
            blocks = (1, self.taps_row(out_hw, phase_w), 0, phase_w, wo)
        else:  # output row by output row
            blocks = (ho, wo, phase_w, wo, wo)
        self.gemm(q, self.out_channels // self.groups, ho * wo, k, groups=self.groups, items=items,
                  b=Matrix(padded, 0, group=cin // self.groups * plane, item=cin * plane),
                  image=(taps, *blocks), **gemm)

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

    # ---- the direct kernels: depthwise and grouped convolution ---------------------------------------------
    def _direct_opencl(self, q, inputs, y, items: int) -> None:
        """The direct kernels: depthwise_conv2d (GPUs), depthwise_rows, or pad_planes then depthwise_padded or
        grouped_rows (CPUs)."""
        x, (h, w), (ho, wo) = inputs[0], inputs[0].shape[-2:], y.shape[-2:]
        cin, cout = self.in_channels, self.out_channels
        (sh, sw), (dh, dw), (top, _), (left, _) = self.stride, self.dilation, *self.pads
        common = (self.cl_weight, self.cl_weight if self.cl_bias is None else self.cl_bias,
                  int(self.cl_bias is not None), *self.cl_epilogue.args(inputs, y), cout, cout // self.groups)
        if self.cl_pad is None:
            q.run(self.cl_direct, (round_up(wo, 8), ho, items * cout), None, y.buffer, x.buffer, *common, h, w,
                  ho, wo, sh, sw, top, left, dh, dw)
            return
        # a work-group per output plane: PoCL's own choice ran 32 planes of 112x112 about half as fast
        local = (ho, 1) if ho <= self.cl_direct_group else None
        if self.cl_unpadded is not None and self.unpadded_rows((h, w)):
            q.run(self.cl_unpadded, (ho, items * cout), local, y.buffer, x.buffer, *common, h, w, ho, wo, sh, top,
                  left, dh, dw)
            return
        padded, padded_h, phase_w, _ = self._pad_planes(q, x, items, block=8)  # the kernels compute blocks of 8 pixels
        if self.cl_grouped:  # common's last value, the multiplier, is cout_g here too
            q.run(self.cl_direct, (ho, items * cout // self.cl_block), local, y.buffer, padded, *common,
                  cin // self.groups, padded_h, phase_w, ho, wo, sh, dh, dw)
            return
        q.run(self.cl_direct, (ho, items * cout), local, y.buffer, padded, *common, padded_h, phase_w, ho, wo,
              sh, dh, dw)

    def unpadded_rows(self, in_hw: tuple) -> bool:
        """Whether depthwise_rows, which reads the input itself, runs at this input size: where its vector blocks,
        every tap inside the row, cover all but UNPADDED_EDGE_PIXELS pixels of a row (cl/conv.cl has the same
        bounds): from the first pixel whose first tap is inside to the end of the last block whose last tap
        (and at stride 2 the column after it, which the block loads too) is inside."""
        w, wo = in_hw[1], self.output_shapes([(self.in_channels, *in_hw)])[0][-1]
        sw, dw, kw, (left, _) = self.stride[1], self.dilation[1], self.kernel_size[1], self.pads[1]
        first, room = -(-left // sw), w + left - (kw - 1) * dw - ROW_BLOCK * sw
        if room < 0 or wo < ROW_BLOCK:
            return False
        last = min(room // sw, wo - ROW_BLOCK)  # where the last vector block starts
        return last >= first and first + wo - last - ROW_BLOCK <= UNPADDED_EDGE_PIXELS
