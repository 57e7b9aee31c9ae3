"""Conv2d: 2-D convolution as im2col followed by one matrix multiply (GEMM) per group; Winograd for 3x3.

Every output pixel of a convolution is the dot product of the weights with the input patch under the
kernel. Copying all those patches side by side, one column per output pixel (im2col), turns the whole
layer into a single matrix product

    out (Cout, Ho*Wo) = W (Cout, Cin*kh*kw) @ columns (Cin*kh*kw, Ho*Wo)

which BLAS runs near the machine's peak speed. With groups, the channels split into `groups` independent
blocks with one such product each; numpy's matmul runs the stack of them in one call. That includes
depthwise convolution (one input channel per group): measured here, those small GEMMs beat summing the
kh*kw shifted taps with elementwise numpy by 2-3x, so depthwise needs no path of its own.

A 1x1 kernel at stride 1 without padding skips the copy: the input already is the column matrix.

3x3 kernels at stride 1, most of a CNN's work, use Winograd's minimal filtering instead (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", 2015). F(m x m, 3x3) computes an m x m block of
outputs from an a x a input tile (a = m + 2; neighbouring tiles overlap by 2 pixels) as

    out_block = A^T [ sum over input channels of (G g G^T) * (B^T d B) ] A

with d the tile, g the 3x3 kernel, `*` the elementwise product and B, G, A small constant matrices. The
kernel transform G g G^T is done once, at build. Over all tiles and channels, the sum at each of the a*a
positions of the transformed tile is a matrix product, so the layer becomes a*a GEMMs
(Cout, Cin) @ (Cin, tiles) with (a/m)^2 / 9 of im2col's multiplies: 1/4 for F(4x4, 3x3), 4/9 for F(2x2, 3x3).
The transforms are matrix products too, B^T and A^T applied along one axis of the tiles at a time. With
numpy they cost about as much as the GEMMs: ResNet-18's 3x3 layers run 1.15-1.35x faster with F(4x4) and
1.05-1.15x with F(2x2), not 4x and 2.25x. Images with too few tiles to pay for reading the larger transformed
weights stay on im2col (see WINOGRAD_MIN_TILES).

On numpy, kuiper's threads (kuiper/cpu/threads.py) share each convolution: bands of output rows when the
image is big enough for every thread to get a band worth a GEMM, else its channels (Winograd's output
channels, im2col's input channels with the partial products summed). An activation the graph fused into the
layer (Layer.fuse) is applied to each band as soon as it is written, while it is still in the cache.

On OpenCL (cl/conv.cl, cl/gemm.cl through kuiper/opencl/gemm.py) there is no Winograd: the same im2col and
GEMM, for every group and batch item in one launch, the bias added by the GEMM. With a gemm_cpu variant (the
rule's on CPUs) im2col writes the column matrix and the GEMM reads it; gemm_gpu variants (the rule's on GPUs)
skip it, reading im2col's entries straight from the input (implicit im2col). The variant is chosen per input
shape (kuiper/opencl/tuning.py). 1x1 stride-1 unpadded kernels are a plain GEMM on the input, and depthwise
convolution (one input channel per group) has a direct kernel of its own: its K = kh*kw is too short for
a GEMM to pay.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiper.layers.base import Layer
from kuiper.opencl.gemm import NO_BIAS, ROW_BIAS, Columns, Gemm, Matrix
from kuiper.layers.registry import register
from kuiper.cpu import threads
from kuiper.opencl import round_up

#: im2col runs over bands of output rows whose column matrix is at most about this size, which bounds its
#: memory for any image size. With kuiper's threads, fewer and larger bands won: on 2 cores ResNet-18's stem
#: took 2.0 ms in one 3.7 MB band per thread against 2.2-2.9 ms in four 0.9 MB bands each (every numpy call a
#: thread makes must take the GIL back, and the other thread often holds it).
COLUMN_BYTES = 4 << 20

#: Winograd runs over bands of tile rows whose work buffers (three per thread) hold about this much each. It only bounds the
#: memory: narrower bands make the a*a GEMMs thinner, and ResNet-18 ran no faster with bands of 256 KiB to
#: 2 MiB than with whole images.
WINOGRAD_BYTES = 4 << 20

#: Winograd's transformed weights are (a/3)^2 times im2col's: with fewer tiles per image than this, the GEMMs
#: are too thin to pay for reading them. ResNet-18 gets F(4x4) at 56x56 and 28x28, F(2x2) at 14x14 and im2col
#: at 7x7, and ran faster so than with 16 (F(4x4) at 14x14) or 64 (F(2x2) at 28x28, im2col at 14x14).
WINOGRAD_MIN_TILES = 32

#: kuiper's threads split an image into bands of tile rows if each band keeps this many tiles (columns of its
#: a*a GEMMs); else each band's input is transformed once and its output channels are split. Bands took
#: ResNet-18's 28x28 layers (21 tiles a band on 2 threads) in 1.6-1.7 ms, channels in 1.9-2.3 ms.
WINOGRAD_BAND_TILES = 16


def batched(array: np.ndarray) -> np.ndarray:
    """View an unbatched (C, H, W) tensor as (1, C, H, W); a batched one stays as it is."""
    return array.reshape((-1,) + array.shape[-3:])


def windows(x: np.ndarray, size: tuple, step: tuple) -> np.ndarray:
    """Every (size_h, size_w) window of x's last two axes, `step` apart: a read-only (N, C, positions_h,
    positions_w, size_h, size_w) view, no copy. numpy's sliding_window_view makes the same view with all
    positions (sliced with ::step after), but checks its arguments for 27 us a call; this takes 7."""
    n, c, h, w = x.shape
    positions = ((h - size[0]) // step[0] + 1, (w - size[1]) // step[1] + 1)
    s_n, s_c, s_h, s_w = x.strides
    return as_strided(x, (n, c, *positions, *size), (s_n, s_c, s_h * step[0], s_w * step[1], s_h, s_w),
                      writeable=False)


def view(buffer: np.ndarray, *shape) -> np.ndarray:
    """The first prod(shape) elements of a flat work buffer, shaped."""
    return buffer[:math.prod(shape)].reshape(shape)  # math.prod: np.prod costs 10 us a call, 0.5 ms a forward


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


class Winograd:
    """The constant matrices of F(m x m, 3x3): B^T (a, a), G (a, 3) and A^T (m, a), with a = m + 2."""

    def __init__(self, m: int, bt, g, at):
        self.m, self.a = m, m + 2
        self.bt = np.array(bt, dtype=np.float32)
        self.g = np.array(g, dtype=np.float64)
        self.at = np.array(at, dtype=np.float32)

    def transform_kernel(self, weight: np.ndarray) -> np.ndarray:
        """G g G^T for every (out, in) channel pair, shaped (a*a, Cout, Cin) for the stacked GEMM."""
        u = np.einsum("pi,ocij,qj->pqoc", self.g, weight.astype(np.float64), self.g)  # float64: one rounding
        return np.ascontiguousarray(u.reshape(self.a * self.a, *weight.shape[:2]), dtype=np.float32)


# The three matrices come from interpolating polynomials at a - 1 points and infinity. F(2x2) takes Lavin &
# Gray's 0, 1, -1. For F(4x4), 0, 1, -1, 1/2, -2 (Barabasz et al., "Error analysis and improving the accuracy
# of Winograd convolution", 2020) give 2-3x less float32 error than their 0, 1, -1, 2, -2: 2e-6 to 4e-6 of the
# largest output for 64 to 512 channels, im2col's being 5e-7. B^T's rows are scaled to integers, G's to match.
F2 = Winograd(2,
              bt=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
              g=[[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
              at=[[1, 1, 1, 0], [0, 1, -1, -1]])
F4 = Winograd(4,
              bt=[[2, -3, -4, 3, 2, 0], [0, -2, 1, 5, 2, 0], [0, 2, -5, 1, 2, 0],
                  [0, -2, -1, 2, 1, 0], [0, 1, -2, -1, 2, 0], [0, 2, -3, -4, 3, 2]],
              g=[[1 / 2, 0, 0], [1 / 6, 1 / 6, 1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                 [-16 / 15, -8 / 15, -4 / 15], [1 / 30, -1 / 15, 2 / 15], [0, 0, 1 / 2]],
              at=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 1 / 2, -2, 0], [0, 1, 1, 1 / 4, 4, 0], [0, 1, -1, 1 / 8, -8, 1]])


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
        # shaped (Cout, 1, 1) so that it broadcasts over (N, Cout, H, W); a copy for alignment (see Conv2d.w_gemm)
        bias = self.weight("bias", (self.out_channels,)) if self.bool_param("bias", True) else None
        self.bias = None if bias is None else np.array(bias).reshape(-1, 1, 1)
        self.activation = None  # an activation the graph fused into this layer (Layer.fuse)
        self.adds_residual = False  # the graph fused a sum into this layer: inputs[1] is added (Layer.fuse_add)
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

    def finish(self, out: np.ndarray, residual: np.ndarray | None) -> None:
        """After the bias, to (a band of) the output just written: the residual of a sum the graph fused into
        this layer (`residual`, the same band of the other tensor), then the fused activation, if any."""
        if residual is not None:
            out += residual
        if self.activation is not None:
            self.activation.apply(out, out)


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

        pointwise = (kh, kw) == (1, 1) and self.stride == (1, 1) and self.pads == ((0, 0), (0, 0))
        self._convolve = self._pointwise if pointwise else self._im2col
        self.winograd_ok = (kh, kw) == (3, 3) and self.stride == self.dilation == (1, 1) and g == 1
        self.w_winograd = {}  # m -> transformed weights, made by prepare: only the variants some shape needs

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

    def prepare(self, input_shapes):
        ho, wo = self.output_shapes(input_shapes)[0][-2:]
        variant = self._winograd_variant(ho, wo) if self.winograd_ok else None
        if variant is not None:
            self.winograd_weights(variant)

    def winograd_weights(self, f: Winograd) -> np.ndarray:
        """G g G^T of the weights for F(m x m, 3x3), made once (by prepare, or on first use)."""
        u = self.w_winograd.get(f.m)
        if u is None:
            u = self.w_winograd[f.m] = f.transform_kernel(self.w_kernel)
        return u

    def fuse(self, activation):
        # numpy only: the graph offers fusion on that backend alone, and forward_opencl never activates
        if self.activation is not None:
            return False
        self.activation = activation
        return True

    def fuse_add(self):
        # a residual added before the activation, so not after one has been fused
        if self.activation is not None or self.adds_residual:
            return False
        self.adds_residual = True
        return True

    def macs(self, input_shapes, output_shapes):
        # each output element is a dot product over one group's (Cin/g, kh, kw) window
        (kh, kw) = self.kernel_size
        return math.prod(output_shapes[0]) * (self.in_channels // self.groups) * kh * kw

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
        x, out = batched(inputs[0]), batched(outputs[0])
        residual = batched(inputs[1]) if self.adds_residual else None
        variant = self._winograd_variant(*out.shape[2:]) if self.winograd_ok else None
        if variant is None:
            self._convolve(x, out, residual)
        else:
            self._winograd(x, out, residual, variant)

    # ---- the three ways to convolve, each adding the bias ------------------------------------------
    def _pointwise(self, x, out, residual):
        """1x1, stride 1, no padding: out[n, g] = W[g] @ x[n, g], all batch items and groups in one call."""
        n, g, hw = x.shape[0], self.groups, x.shape[2] * x.shape[3]
        threads.matmul(self.w_gemm, x.reshape(n, g, -1, hw), out.reshape(n, g, -1, hw))
        self.add_bias(out)
        self.finish(out, residual)

    def _im2col(self, x, out, residual):
        """Column matrix, then GEMM, for one band of output rows at a time (see COLUMN_BYTES).

        kuiper's threads (cpu/threads.py) take a share of the bands each, when there are enough bands
        worth a thread. Otherwise (a small image, as in ResNet's last layers) they share a band's input channels:
        each copies and multiplies its channels' rows of the column matrix (its part of the GEMM's depth), and the
        partial products are summed; the copy, slow for narrow images, is split too. Grouped convolutions of
        small images run on one thread."""
        windows = self._windows(x)  # (N, C, kh, kw, Ho, Wo), a view
        n, c, kh, kw, ho, wo = windows.shape
        g, k = self.groups, c * kh * kw
        units = threads.bands(n, ho, max(1, COLUMN_BYTES // (4 * k * wo)), wo, wo * k * self.out_channels // g)
        out_pixels = out.reshape(n, g, -1, ho * wo)

        def columns(worker, item, top, band, first=0, stop=c):
            """Input channels first..stop-1 of the band's column matrix, in this thread's buffer: im2col itself."""
            buffer = self.scratch.get(f"columns{worker}", (k * units[0][2] * wo,))
            matrix = buffer[:(stop - first) * kh * kw * band * wo].reshape(stop - first, kh, kw, band, wo)
            np.copyto(matrix, windows[item, first:stop, :, :, top:top + band])
            return matrix.reshape(g, -1, band * wo)

        def finish(item, top, band):  # while the band is still in the cache
            self.add_bias(out[item, :, top:top + band])
            self.finish(out[item, :, top:top + band], None if residual is None else residual[item, :, top:top + band])

        def gemm(worker, item, top, band):
            np.matmul(self.w_gemm, columns(worker, item, top, band),
                      out=out_pixels[item, :, :, top * wo:(top + band) * wo])
            finish(item, top, band)

        if len(units) >= threads.num_threads() or g > 1:
            threads.parallel(lambda first, stop, worker: [gemm(worker, *unit) for unit in units[first:stop]],
                             len(units))
            return
        for item, top, band in units:
            pixels = out_pixels[item, 0, :, top * wo:(top + band) * wo]
            partials = []

            def part(first, stop, worker):
                target = pixels if worker == 0 else self.scratch.get(f"partial{worker}", pixels.shape)
                np.matmul(self.w_gemm[0, :, first * kh * kw:stop * kh * kw],
                          columns(worker, item, top, band, first, stop)[0], out=target)
                if worker:
                    partials.append(target)
            threads.parallel(part, c, grain=-(-threads.MIN_MACS // (self.out_channels * kh * kw * band * wo)))
            for partial in partials:
                pixels += partial
            finish(item, top, band)

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
        spans = windows(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), (sh, sw))
        # (N, C, Ho, Wo, span_h, span_w): keep every dilation-th tap
        return spans[:, :, :, :, ::dh, ::dw].transpose(0, 1, 4, 5, 2, 3)

    def _winograd_variant(self, ho: int, wo: int) -> Winograd | None:
        """F(4x4) if the output has enough of its tiles, else F(2x2) if it has enough of those, else None."""
        for variant in (F4, F2):
            if -(-ho // variant.m) * -(-wo // variant.m) >= WINOGRAD_MIN_TILES:
                return variant
        return None

    def _winograd(self, x, out, residual, f: Winograd):
        """Winograd F(m x m, 3x3) over bands of tile rows (see the module docstring), adding the bias.

        As in im2col, kuiper's threads take a share of the bands each when there are enough bands worth a
        thread; otherwise each band's input is transformed once and its output channels are split."""
        n, c, h, w = x.shape
        cout, ho, wo = out.shape[1:]
        m, a = f.m, f.a
        tiles_h, tiles_w = -(-ho // m), -(-wo // m)  # the last tiles may hang over the output's edge
        (top, bottom), (left, right) = self.pads
        # m - 1 more zeros below and to the right than the padding asks for cover the overhanging tiles, whose
        # extra outputs are dropped. The shape depends on the input's size alone: a buffer used for another input
        # size, whose pixels would sit where this one's zeros belong, is never reused
        padded = self.scratch.get(f"winograd_padded{m}", (n, c, h + top + bottom + m - 1, w + left + right + m - 1))
        tiles = windows(padded, (a, a), (m, m))  # (N, C, tiles_h, tiles_w, a, a)
        exact = (ho, wo) == (m * tiles_h, m * tiles_w)
        whole = out if exact else self.scratch.get("winograd_out", (n, cout, m * tiles_h, m * tiles_w))
        blocks = whole.reshape(n, cout, tiles_h, m, tiles_w, m)  # output pixel (m*ty + y, m*tx + x)

        u = self.winograd_weights(f)
        units = threads.bands(n, tiles_h, max(1, WINOGRAD_BYTES // (4 * a * a * max(c, cout) * tiles_w)),
                              tiles_w, tiles_w * a * a * c * cout, WINOGRAD_BAND_TILES)
        size = (a * a * max(c, cout) * units[0][2] * tiles_w,)

        def buffers(worker):
            """A thread's three work buffers: each step below reads one and writes another."""
            return [self.scratch.get(f"winograd_{name}{worker}", size) for name in "abc"]

        def transform_input(worker, item, row, band):
            """B^T d B for every tile of the band and every input channel, shaped (a*a, C, tiles)."""
            buf_a, buf_b, _ = buffers(worker)
            t = band * tiles_w
            # the padded rows the band's tiles cover; the 2 rows it shares with the next band get the same
            # values from both threads
            first, stop = max(row * m, top), min((row + band) * m + a - m, top + h)
            padded[item, :, first:stop, left:left + w] = x[item, :, first - top:stop - top]
            # im2col of tiles: d[i, j, channel, tile] = pixel (i, j) of the tile
            d = view(buf_a, a, a, c, band, tiles_w)
            np.copyto(d, tiles[item, :, row:row + band].transpose(3, 4, 0, 1, 2))
            # B^T d B: B^T mixes the tile's rows i, then (batched over the new rows p) its columns j
            bt_d = view(buf_b, a, a, c * t)
            np.matmul(f.bt, d.reshape(a, -1), out=bt_d.reshape(a, -1))
            v = view(buf_a, a, a, c * t)
            np.matmul(f.bt, bt_d, out=v)
            return v.reshape(a * a, c, t)

        def transform_output(worker, v, item, row, band, first, stop):
            """Output channels first..stop-1 of the band: the a*a GEMMs, A^T mm A, and the bias."""
            _, buf_b, buf_c = buffers(worker)
            t, k = band * tiles_w, stop - first
            mm = view(buf_b, a * a, k, t)
            np.matmul(u[:, first:stop], v, out=mm)  # the a*a GEMMs, in one stacked call
            # A^T mm A: A^T mixes rows p into output rows y; then columns q into output columns x, with the
            # (cout, tile) pairs as rows, so that x comes out innermost as it is in the output
            at_mm = view(buf_c, m, a, k * t)
            np.matmul(f.at, mm.reshape(a, -1), out=at_mm.reshape(m, -1))
            y = view(buf_b, m, k * t, m)
            np.matmul(at_mm.transpose(0, 2, 1), f.at.T, out=y)
            y = y.reshape(m, k, band, tiles_w, m).transpose(1, 2, 0, 3, 4)
            target = blocks[item, first:stop, row:row + band]
            if self.bias is None:
                np.copyto(target, y)
            else:
                np.add(y, self.bias[first:stop].reshape(-1, 1, 1, 1, 1), out=target)
            if exact:  # the same pixels as whole output rows: numpy walks those in longer runs
                rows = slice(row * m, (row + band) * m)
                self.finish(out[item, first:stop, rows], None if residual is None else residual[item, first:stop, rows])

        def bands_part(first, stop, worker):  # whole bands, all output channels
            for unit in units[first:stop]:
                transform_output(worker, transform_input(worker, *unit), *unit, 0, cout)

        if len(units) >= threads.num_threads():
            threads.parallel(bands_part, len(units))
        else:  # too few bands to share: transform each band's input once, split its output channels
            for unit in units:
                v = transform_input(0, *unit)
                threads.parallel(lambda first, stop, worker: transform_output(worker, v, *unit, first, stop), cout,
                                 grain=-(-threads.MIN_MACS // (a * a * c * unit[2] * tiles_w)))
        if not exact:  # the residual and activation, once the overhanging tiles are cut off
            out[...] = whole[:, :, :ho, :wo]
            self.finish(out, residual)

    # ---- OpenCL -----------------------------------------------------------------------------------
    def build_opencl(self, rt):
        self.cl_bias = None if self.bias is None else rt.upload(self.bias.ravel())
        # one input channel per group (depthwise, with any channel multiplier): too thin for a GEMM
        if self.in_channels == self.groups:
            self.cl_depthwise = rt.kernel("conv.cl", "depthwise_conv2d")
            self.cl_weight = rt.upload(self.w_kernel)
            return
        self.cl_depthwise = None
        self.cl_pointwise = self._convolve == self._pointwise
        self.gemm = Gemm(rt, kernel_size=None if self.cl_pointwise else self.kernel_size)
        self.variants = self.gemm.choices(self.gemm_dims, "conv.cl")
        self.cl_weight = rt.upload(self.w_gemm)
        if not self.cl_pointwise:  # for the GEMM variants that read a column matrix, not the images
            self.cl_im2col = rt.kernel("conv.cl", "im2col")
            self.cl_whole_rows = rt.is_cpu  # im2col's work-items: whole output rows on CPUs, pixels on GPUs
            self.cl_columns = Columns(rt)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if not y.size:  # OpenCL refuses an empty range
            return
        (h, w), (ho, wo), g = x.shape[-2:], y.shape[-2:], self.groups
        cin, cout = self.in_channels, self.out_channels
        items = x.size // (cin * h * w)
        (top, _), (left, _) = self.pads
        geometry = (*self.kernel_size, *self.stride, top, left, *self.dilation)
        if self.cl_depthwise is not None:
            q.run(self.cl_depthwise, (round_up(ho * wo, 16), items * cout), None, y.buffer, x.buffer,
                  self.cl_weight, self.cl_weight if self.cl_bias is None else self.cl_bias,
                  int(self.cl_bias is not None), cout, cout // cin, h, w, ho, wo, *geometry)
            return
        cin_g, cout_g, k = cin // g, cout // g, self.w_gemm.shape[2]
        bias = dict(bias=self.cl_bias, bias_mode=NO_BIAS if self.cl_bias is None else ROW_BIAS)
        weights = Matrix(self.cl_weight, k, group=cout_g * k)
        out = Matrix(y.buffer, ho * wo, group=cout_g * ho * wo, item=cout * ho * wo)
        variant = self.variants.pick((x.shape,))
        implicit = variant in self.gemm.implicit
        # the GEMM reads B from the input itself when the input is the column matrix (1x1) or when it computes
        # im2col's entries on the fly (implicit); otherwise im2col writes the column matrix first
        if self.cl_pointwise or implicit:
            image = (h, w, wo, *self.stride, top, left, *self.dilation) if implicit else ()
            images = Matrix(x.buffer, h * w, group=cin_g * h * w, item=cin * h * w)
            self.gemm(q, cout_g, ho * wo, k, c=out, a=weights, b=images, groups=g, items=items, image=image,
                      variant=variant, **bias)
            return
        columns, span = self.cl_columns, wo if self.cl_whole_rows else 1
        for first, count in columns.chunks(items, g * k * ho * wo):
            q.run(self.cl_im2col, (round_up(ho * -(-wo // span), 16), k, count * g), None, columns.buffer,
                          x.buffer, first * cin * h * w, span, g, cin_g, h, w, ho, wo, *geometry)
            self.gemm(q, cout_g, ho * wo, k, c=out._replace(offset=first * cout * ho * wo), a=weights,
                                b=Matrix(columns.buffer, ho * wo, group=k * ho * wo, item=g * k * ho * wo),
                                groups=g, items=count, variant=variant, **bias)

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack) of the GEMM for these input shapes: one (Cout/g, K) @ (K, Ho*Wo) per group and item."""
        shape = shapes[0]
        ho, wo = self.output_shapes([shape])[0][-2:]
        return self.out_channels // self.groups, ho * wo, math.prod(shape[:-3]) * self.groups
