"""The numpy backend's Conv2d: the reference's im2col and GEMM (kuiper/layers/conv2d.py), fast, in nine variants.

    pointwise       1x1 kernels at stride 1 without padding: the input already is the column matrix, no copy
    im2col          any convolution: the column matrix over bands of output rows, in buffers kept between forwards
    winograd_f4     3x3 kernels at stride 1, ungrouped and undilated: Winograd's F(4x4, 3x3) (kuiper/core/winograd.py)
    winograd_f2     the same with F(2x2, 3x3)
    depthwise_nchw  one input channel per group (depthwise): the kh*kw taps summed by einsum, channel by channel
    depthwise_hcw   the same over rows that hold every channel side by side (kuiper/cpu/depthwise.py)
    depthwise_hwc   the same with the channels innermost, for small images of many channels
    live taps       without the kernel rows and columns that read only padding at this input size
                    (Conv2d.cropped), by the smaller convolution's own rule
    phases          dilated at stride 1: the undilated kernel over a mosaic of the input's phases
                    (Conv2d.undilated), by that convolution's rule: Winograd for 3x3 kernels

Grouped convolutions are a stack of GEMMs, one per group, in one numpy call. For depthwise convolution those
GEMMs are 1 x kh*kw by kh*kw x pixels, too thin for BLAS, and their column matrix is kh*kw copies of the
image: the depthwise variants sum the taps with einsum instead (`_depthwise_rule` says which, and where
im2col stays faster).

Winograd does (a/m)^2 / 9 of im2col's multiplies, but with numpy its transforms cost about as much as its
GEMMs, so it gains far less than the 4x (F(4x4)) and 2.25x (F(2x2)) its multiplies promise. Images with
too few tiles to pay for reading the larger transformed weights stay on im2col (see WINOGRAD_MIN_TILES).
The rule (`Conv2d._rule`) picks a variant per input shape; the graph fixes the choice when it plans a shape
(kuiper/core/variants.py), which makes Winograd's transformed weights then, not in a forward.

kuiper's threads (kuiper/cpu/threads.py) share each convolution: bands of output rows when the image is big
enough for every thread to get a band worth a GEMM (and, for Winograd, its transformed weights small enough
for every thread to read), else its channels (Winograd's input channels, then its output channels; im2col's
input channels with the partial products summed); the depthwise variants always split the channels. A sum and
an activation fused after the convolution (kuiper/layers/fused.py) run on each band as soon as its bias is
added, while it is still in the cache.

The constants below are set by benchmarks/conv2d.py and by per-operator profiles (`kuiper run MODEL
--profile`); docs/tuning.md keeps the measurements.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiper.cpu import depthwise, threads
from kuiper.cpu.registry import fast
from kuiper.cpu.scratch import KeepsScratch, view
from kuiper.core.winograd import F2, F4, Winograd, windows
from kuiper.layers import conv2d
from kuiper.layers.conv2d import batched
from kuiper.layers.fused import Epilogue
from kuiper.core.variants import Variant, Variants

#: im2col runs over bands of output rows whose column matrix is at most about this size, which bounds its
#: memory for any image size. With kuiper's threads few large bands beat many small ones: every numpy call a
#: thread makes must take the GIL back, and the other thread often holds it.
COLUMN_BYTES = 4 << 20

#: copying one float into im2col's column matrix costs about as much as this many of its GEMM's multiply-adds
#: (as kuiper/cpu/depthwise.py's GEMM_SPEEDUP): whether an image is cut into a band per thread counts both, so
#: that a thin GEMM behind a large copy (a grouped convolution's) is shared too.
IM2COL_COPY_MACS = 32

#: Winograd runs over bands of tile rows whose work buffers (three per thread) hold about this much each, or
#: as much as the transformed weights where those are larger: each band's GEMMs read all of the weights, so a
#: band that holds much less than they do waits on memory.
WINOGRAD_BYTES = 4 << 20

#: Winograd's transformed weights are (a/3)^2 times im2col's: with fewer tiles per image than this, the GEMMs
#: are too thin to pay for reading them. ResNet-18 gets F(4x4) at 56x56 and 28x28, F(2x2) at 14x14 and im2col
#: at 7x7 (benchmarks/conv2d.py times each layer).
WINOGRAD_MIN_TILES = 32

#: kuiper's threads split an image into bands of tile rows if each band keeps this many tiles (columns of its
#: a*a GEMMs) and the transformed weights are at most WINOGRAD_SHARED_WEIGHTS bytes; else they split each band's
#: input channels to transform it, then its output channels. Where bands keep this many tiles they are faster.
WINOGRAD_BAND_TILES = 16

#: each thread's band reads all of the transformed weights, and the threads do so at once: above this many
#: bytes of them the threads share one band's channels instead, and the weights are read once.
WINOGRAD_SHARED_WEIGHTS = 3 << 20

#: a band's input channels are split over the threads in parts of at least this many (layers with weights
#: above WINOGRAD_SHARED_WEIGHTS have hundreds)
WINOGRAD_SPLIT_CHANNELS = 64

#: depthwise convolution at stride 1 (one input channel per group, kuiper/cpu/depthwise.py) runs depthwise_nchw
#: on outputs of this many pixels or more; on smaller ones its innermost loops (a plane's pixels) are too short,
#: and depthwise_hcw runs.
DEPTHWISE_NCHW_PIXELS = 400

#: ... but depthwise_hwc on this many channels or more, and strided too on outputs smaller than that (or with
#: kernels of DEPTHWISE_STRIDED_TAPS, smaller than DEPTHWISE_STRIDED_PIXELS): its einsum's innermost loop runs
#: over a part's channels, and its transposing copies cost more than that saves on large images.
DEPTHWISE_HWC_CHANNELS = 96

#: strided depthwise convolution runs depthwise_hcw with kernels of this many taps or more, or on outputs of this
#: many pixels or more; else im2col, as fast or faster on small outputs of small kernels.
DEPTHWISE_STRIDED_TAPS = 25
DEPTHWISE_STRIDED_PIXELS = 2000
#: ... or with this many channels or more; on fewer, im2col stays ahead
DEPTHWISE_STRIDED_CHANNELS = 128


@fast("nn.Conv2d")
class Conv2d(KeepsScratch, conv2d.Conv2d):
    def __init__(self, op):
        super().__init__(op)
        # Winograd's matrices are for a 3x3 kernel moving one pixel at a time over all input channels
        self.winograd_ok = self.kernel_size == (3, 3) and self.stride == self.dilation == (1, 1) and self.groups == 1
        # only the variants this geometry allows: each of them can run any input shape, so all are candidates
        ways = [Variant("im2col", None, self._im2col, cpu=True)]
        if self.pointwise:
            ways.append(Variant("pointwise", None, self._pointwise, cpu=True))
        if self.winograd_ok:
            ways += [self._winograd_variant(f) for f in (F4, F2)]
        # one input channel per group (each read by out/in output channels): the taps summed by einsum
        self.depthwise = None
        if self.groups == self.in_channels > 1:
            self.depthwise = depthwise.Depthwise(self.w_kernel, self.bias, self.stride, self.dilation, self.pads,
                                                 self.scratch)
            ways += [self._depthwise_variant(name) for name in depthwise.LAYOUTS]
        # padding some taps may never leave, for some input sizes (Conv2d.cropped)
        self.crops = {}
        if math.prod(self.kernel_size) > 1 and any(map(any, self.pads)):
            ways.append(Variant("live taps", None, self._live_taps, cpu=True))
        self.undilated_conv = None  # made on first use
        if self.dilation != (1, 1) and self.stride == (1, 1):
            ways.append(Variant("phases", None, self._phases, cpu=True))
        self.variants = Variants(None, (), ways, self._rule, self._candidates)

    def _winograd_variant(self, f: Winograd) -> Variant:
        """F(m x m, 3x3) as a variant: building it transforms the weights, once; each run fetches them."""
        variant = Variant(f"winograd_f{f.m}", lambda: f.transform_kernel(self.w_kernel),
                          lambda x, out, epilogue: self._winograd(x, out, epilogue, f, variant.kernel()), cpu=True)
        return variant

    def _depthwise_variant(self, layout: str) -> Variant:
        return Variant(layout, None, lambda x, out, epilogue: self.depthwise.forward(layout, x, out, epilogue),
                       cpu=True)

    def _rule(self, shapes) -> str:
        """"live taps" where some taps read only padding at this size; "phases" where a dilated convolution's
        mosaic gets Winograd; depthwise convolutions by _depthwise_rule; else F(4x4) if the output has enough of
        its tiles, else F(2x2) if it has enough of those (3x3 stride-1 layers); else pointwise where the kernel
        allows, else im2col."""
        if "live taps" in self.variants.by_name and self._crop(shapes[0]) is not None:
            return "live taps"
        mosaic = self._mosaic(shapes[0])
        if mosaic is not None and self._undilated()._rule([mosaic]).startswith("winograd"):
            return "phases"
        if self.depthwise is not None:
            return self._depthwise_rule(shapes[0])
        if self.winograd_ok:
            ho, wo = self.output_shapes([shapes[0]])[0][-2:]
            for f in (F4, F2):
                if math.prod(f.tiles(ho, wo)) >= WINOGRAD_MIN_TILES:
                    return f"winograd_f{f.m}"
        return "pointwise" if self.pointwise else "im2col"

    def _candidates(self, shapes) -> list:
        """Every variant, but "live taps" only for input sizes where some taps read nothing but padding, and
        "phases" only where the input's phases tile it evenly."""
        offered = {"live taps": self._crop, "phases": self._mosaic}
        return [name for name in self.variants.by_name
                if name not in offered or offered[name](shapes[0]) is not None]

    def _depthwise_rule(self, shape) -> str:
        """At stride 1, depthwise_nchw for outputs of DEPTHWISE_NCHW_PIXELS or more, else depthwise_hwc (on
        DEPTHWISE_HWC_CHANNELS or more) or depthwise_hcw. Strided, depthwise_hwc on that many channels for outputs
        of fewer pixels, or of fewer than DEPTHWISE_STRIDED_PIXELS with kernels of DEPTHWISE_STRIDED_TAPS or more;
        else depthwise_hcw for kernels that large, outputs of DEPTHWISE_STRIDED_PIXELS or more or
        DEPTHWISE_STRIDED_CHANNELS or more, else im2col. With a channel multiplier, im2col: each of its columns
        serves the group's k output channels, where the depthwise variants copy the input k times."""
        if self.out_channels != self.in_channels:
            return "im2col"
        ho, wo = self.output_shapes([shape])[0][-2:]
        small = depthwise.HWC if self.in_channels >= DEPTHWISE_HWC_CHANNELS else depthwise.HCW
        if self.stride == (1, 1):
            return depthwise.NCHW if ho * wo >= DEPTHWISE_NCHW_PIXELS else small
        large_kernel = math.prod(self.kernel_size) >= DEPTHWISE_STRIDED_TAPS
        if small == depthwise.HWC and (ho * wo < DEPTHWISE_NCHW_PIXELS
                                       or large_kernel and ho * wo < DEPTHWISE_STRIDED_PIXELS):
            return depthwise.HWC
        if large_kernel or ho * wo >= DEPTHWISE_STRIDED_PIXELS or self.in_channels >= DEPTHWISE_STRIDED_CHANNELS:
            return depthwise.HCW
        return "im2col"

    def workspace_bytes(self, input_shapes):
        """What `scratch` holds for the variant the rule picks, at most: im2col's padded input and, per thread
        that gets a part, a band's column matrix and partial sums; Winograd's padded input, its whole output
        where tiles overhang, and three work buffers per thread that gets a part; the depthwise variants' buffers
        per thread (Depthwise.workspace_bytes). Bands are cut as forward cuts them, so more threads mean thinner
        bands, not more memory."""
        variant = self._rule(input_shapes)
        if variant == "pointwise":
            return 0
        if variant == "live taps":
            return self._crop(input_shapes[0]).workspace_bytes(input_shapes)
        if variant == "phases":
            mosaic, inner = self._mosaic(input_shapes[0]), self._undilated()
            result = inner.output_shapes([mosaic])[0]
            return 4 * (math.prod(mosaic) + math.prod(result)) + inner.workspace_bytes([mosaic])
        shape = input_shapes[0]
        n, c, h, w = (math.prod(shape[:-3]), *shape[-3:])
        if variant in depthwise.LAYOUTS:
            return self.depthwise.workspace_bytes(variant, (n, c, h, w))
        ho, wo = self.output_shapes(input_shapes)[0][-2:]
        (top, bottom), (left, right) = self.pads
        cout = self.out_channels
        if variant == "im2col":
            k = c * math.prod(self.kernel_size)
            padded = n * c * (h + top + bottom) * (w + left + right) if top or bottom or left or right else 0
            units = self._im2col_bands(n, k, ho, wo)
            band = units[0][2]
            if len(units) >= threads.num_threads() or self.groups > 1:  # as _im2col splits: bands ...
                workers = threads.parts(len(units))
            else:  # ... or a band's input channels
                workers = threads.parts(c, -(-threads.MIN_MACS // (cout * k // c * band * wo)))
            return 4 * padded + max(1, workers) * 4 * (k + cout) * band * wo
        f = F4 if variant == "winograd_f4" else F2
        tiles_h, tiles_w = f.tiles(ho, wo)
        padded = n * c * (h + top + bottom + f.m - 1) * (w + left + right + f.m - 1)
        whole = 0 if (ho, wo) == (f.m * tiles_h, f.m * tiles_w) else n * cout * f.m * tiles_h * f.m * tiles_w
        units = self._winograd_bands(f, n, c, tiles_h, tiles_w)
        band = units[0][2]
        shared = 0
        if len(units) >= threads.num_threads():  # as _winograd splits: bands, or a band's channels
            workers = threads.parts(len(units))
        else:
            workers = max(threads.parts(c, WINOGRAD_SPLIT_CHANNELS),
                          threads.parts(cout, -(-threads.MIN_MACS // (f.a * f.a * c * band * tiles_w))))
            shared = f.a * f.a * c * band * tiles_w
        return 4 * (padded + whole + shared) + max(1, workers) * 3 * 4 * f.a * f.a * max(c, cout) * band * tiles_w

    def _im2col_bands(self, n: int, k: int, ho: int, wo: int) -> list:
        """im2col's bands of output rows: columns of at most COLUMN_BYTES, shared evenly over the threads."""
        return threads.bands(n, ho, max(1, COLUMN_BYTES // (4 * k * wo)), wo,
                             wo * k * (self.out_channels // self.groups + IM2COL_COPY_MACS))

    def _winograd_bands(self, f: Winograd, n: int, c: int, tiles_h: int, tiles_w: int) -> list:
        """Winograd's bands of tile rows: work buffers of about WINOGRAD_BYTES or the transformed weights' size,
        shared evenly over the threads where the weights are small enough to be read by each."""
        width = f.a * f.a * max(c, self.out_channels) * tiles_w
        weights = 4 * f.a * f.a * c * self.out_channels
        shared = weights <= WINOGRAD_SHARED_WEIGHTS
        return threads.bands(n, tiles_h, max(1, max(WINOGRAD_BYTES, weights) // (4 * width)), tiles_w,
                             tiles_w * f.a * f.a * c * self.out_channels, WINOGRAD_BAND_TILES if shared else math.inf)

    def forward_numpy(self, inputs, outputs):
        self.forward_epilogue(inputs, outputs, Epilogue([], inputs))

    def forward_epilogue(self, inputs, outputs, epilogue):
        """forward_numpy, and `epilogue` on each part of the output right after its bias is added."""
        # keyed by the operator's input shapes, as the graph fixed them: a fused operator's include the tensors
        # its epilogue adds. Arrays' shapes already are the tuples of ints shape_key makes, at a third of its cost
        variant = self.variants.pick(tuple(x.shape for x in epilogue.inputs))
        x, out = batched(inputs[0]), batched(outputs[0])
        if self.edge_pads is not None:  # reflect, replicate or circular: every variant runs on the padded input
            x = self.edge_padded(x)
        if outputs[0].ndim == 3:  # the tensors the epilogue adds, seen as (1, C, H, W) like the output
            epilogue = epilogue.reshaped(out.shape)
        variant(x, out, epilogue)

    # ---- the variants: each adds the bias and runs the epilogue --------------------------------------
    def _crop(self, shape):
        """cropped() for this input shape's size, made once."""
        in_hw = tuple(shape[-2:])
        if in_hw not in self.crops:
            self.crops[in_hw] = self.cropped(in_hw)
        return self.crops[in_hw]

    def _live_taps(self, x, out, epilogue):
        """The convolution without the taps that read only padding at this input size, by its own rule."""
        cropped = self._crop(x.shape)
        cropped.variants.pick((x.shape,))(x, out, epilogue)

    def _mosaic(self, shape) -> tuple | None:
        """The input shape of the phases variant's undilated convolution, for inputs of `shape`: per axis, d
        blocks (d the dilation), each a phase framed by its share of the padding. None where the phases do not
        tile evenly (strided, or a size or padding that is not a multiple of the dilation)."""
        if "phases" not in self.variants.by_name:
            return None
        size = list(shape[:-2])
        for length, (before, after), d in zip(shape[-2:], self.pads, self.dilation):
            if length % d or before % d or after % d:
                return None
            size.append(length + before + after)  # d blocks of (length + before + after) / d
        return tuple(size)

    def _undilated(self):
        if self.undilated_conv is None:
            self.undilated_conv = self.undilated()
        return self.undilated_conv

    def _phases(self, x, out, epilogue):
        """The undilated kernel over a mosaic of x's phases, then each phase's outputs out of its block.

        At dilation d (stride 1), output row a + d*i reads only input rows a + d*j: phase a of the input, whose
        rows are x[a::d]. Block a of the mosaic is that phase with padding/d zero rows above and below, and an
        undilated convolution without padding over the mosaic computes phase a's outputs from rows of block a
        alone; the k - 1 output rows whose windows straddle two blocks are computed and dropped. Columns alike.
        So a dilated 3x3 convolution gets Winograd's arithmetic instead of im2col's."""
        inner = self._undilated()
        n, c, h, w = x.shape
        cout, ho, wo = out.shape[1:]
        dh, dw = self.dilation
        (top, bottom), (left, right) = self.pads
        bh, bw = (h + top + bottom) // dh, (w + left + right) // dw  # a block: a phase and its frame
        mosaic = self.scratch.get("phases", self._mosaic(x.shape))  # new buffers are zero: the frames stay so
        blocks = mosaic.reshape(n, c, dh, bh, dw, bw)[:, :, :, top // dh:top // dh + h // dh, :,
                                                      left // dw:left // dw + w // dw]
        np.copyto(blocks, x.reshape(n, c, h // dh, dh, w // dw, dw).transpose(0, 1, 3, 2, 5, 4))
        result = self.scratch.get("phases_out", inner.output_shapes([mosaic.shape])[0])
        inner.variants.pick((mosaic.shape,))(mosaic, result, Epilogue([], [mosaic]))
        # phase (a, b)'s outputs start at row a*bh and column b*bw of the result
        s_n, s_c, s_h, s_w = result.strides
        by_phase = as_strided(result, (n, cout, dh, ho // dh, dw, wo // dw), (s_n, s_c, bh * s_h, s_h, bw * s_w, s_w))
        np.copyto(out.reshape(n, cout, ho // dh, dh, wo // dw, dw), by_phase.transpose(0, 1, 3, 2, 5, 4))
        epilogue.apply(out)

    def _pointwise(self, x, out, epilogue):
        """1x1, stride 1, no padding: out[n, g] = W[g] @ x[n, g], all batch items and groups in one call."""
        n, g, hw = x.shape[0], self.groups, x.shape[2] * x.shape[3]
        threads.matmul(self.w_gemm, x.reshape(n, g, -1, hw), out.reshape(n, g, -1, hw))
        self.add_bias(out)
        epilogue.apply(out)

    def _padded(self, x):
        """x zero-padded in a buffer kept between forwards, whose zero border is never written: no allocation."""
        (top, bottom), (left, right) = self.pads
        if not (top or bottom or left or right):
            return x
        n, c, h, w = x.shape
        padded = self.scratch.get("padded", (n, c, h + top + bottom, w + left + right))
        padded[:, :, top:top + h, left:left + w] = x
        return padded

    def _im2col(self, x, out, epilogue):
        """Column matrix, then GEMM, for one band of output rows at a time (see COLUMN_BYTES).

        kuiper's threads (cpu/threads.py) take a share of the bands each, when there are enough bands
        worth a thread. Otherwise (a small image, as in ResNet's last layers) they share a band's input channels:
        each copies and multiplies its channels' rows of the column matrix (its part of the GEMM's depth), and the
        partial products are summed; the copy, slow for narrow images, is split too. Grouped convolutions of
        small images run on one thread."""
        windows = self.kernel_windows(self._padded(x))  # (N, C, kh, kw, Ho, Wo), a view
        n, c, kh, kw, ho, wo = windows.shape
        g, k = self.groups, c * kh * kw
        units = self._im2col_bands(n, k, ho, wo)
        out_pixels = out.reshape(n, g, -1, ho * wo)

        def columns(worker, item, top, band, first=0, stop=c):
            """Input channels first..stop-1 of the band's column matrix, in this thread's buffer: im2col itself."""
            buffer = self.scratch.get(f"columns{worker}", (k * units[0][2] * wo,))
            matrix = buffer[:(stop - first) * kh * kw * band * wo].reshape(stop - first, kh, kw, band, wo)
            np.copyto(matrix, windows[item, first:stop, :, :, top:top + band])
            return matrix.reshape(g, -1, band * wo)

        def finish(item, top, band):  # while the band is still in the cache
            where = (item, slice(None), slice(top, top + band))
            part = out[where]
            self.add_bias(part)
            epilogue.apply(part, where)

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

    def _winograd(self, x, out, epilogue, f: Winograd, u: np.ndarray):
        """Winograd F(m x m, 3x3) with the transformed weights `u`, over bands of tile rows (see
        kuiper/core/winograd.py).

        As in im2col, kuiper's threads take a share of the bands each when there are enough bands worth a
        thread; otherwise each band's input is transformed once and its output channels are split."""
        n, c, h, w = x.shape
        cout, ho, wo = out.shape[1:]
        m, a = f.m, f.a
        tiles_h, tiles_w = f.tiles(ho, wo)  # the last tiles may hang over the output's edge
        (top, bottom), (left, right) = self.pads
        # m - 1 more zeros below and to the right than the padding asks for cover the overhanging tiles, whose
        # extra outputs are dropped. The shape depends on the input's size alone: a buffer used for another input
        # size, whose pixels would sit where this one's zeros belong, is never reused
        padded = self.scratch.get(f"winograd_padded{m}", (n, c, h + top + bottom + m - 1, w + left + right + m - 1))
        tiles = windows(padded, (a, a), (m, m))  # (N, C, tiles_h, tiles_w, a, a)
        exact = (ho, wo) == (m * tiles_h, m * tiles_w)
        whole = out if exact else self.scratch.get("winograd_out", (n, cout, m * tiles_h, m * tiles_w))
        blocks = whole.reshape(n, cout, tiles_h, m, tiles_w, m)  # output pixel (m*ty + y, m*tx + x)

        units = self._winograd_bands(f, n, c, tiles_h, tiles_w)
        size = (a * a * max(c, cout) * units[0][2] * tiles_w,)

        def buffers(worker):
            """A thread's three work buffers: each step below reads one and writes another."""
            return [self.scratch.get(f"winograd_{name}{worker}", size) for name in "abc"]

        def transform_input(worker, item, row, band, first=0, stop=c, v=None):
            """B^T d B for every tile of the band and input channels first..stop-1, into their share of `v`, an
            (a, a, C * tiles) array (by default the worker's own buffer); returns v shaped (a*a, C, tiles)."""
            buf_a, buf_b, _ = buffers(worker)
            t, k = band * tiles_w, stop - first
            # the padded rows the band's tiles cover; the 2 rows it shares with the next band get the same
            # values from both threads
            top_row, stop_row = max(row * m, top), min((row + band) * m + a - m, top + h)
            rows = slice(top_row - top, stop_row - top)
            padded[item, first:stop, top_row:stop_row, left:left + w] = x[item, first:stop, rows]
            # im2col of tiles: d[i, j, channel, tile] = pixel (i, j) of the tile
            d = view(buf_a, a, a, k, band, tiles_w)
            np.copyto(d, tiles[item, first:stop, row:row + band].transpose(3, 4, 0, 1, 2))
            # B^T d B: B^T mixes the tile's rows i, then (batched over the new rows p) its columns j
            bt_d = view(buf_b, a, a, k * t)
            np.matmul(f.bt, d.reshape(a, -1), out=bt_d.reshape(a, -1))
            v = view(buf_a, a, a, c * t) if v is None else v
            np.matmul(f.bt, bt_d, out=v[:, :, first * t:stop * t])
            return v.reshape(a * a, c, t)

        def transform_output(worker, v, item, row, band, first, stop):
            """Output channels first..stop-1 of the band: the a*a GEMMs, A^T mm A, the bias, the epilogue."""
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
                where = (item, slice(first, stop), slice(row * m, (row + band) * m))
                epilogue.apply(out[where], where)

        def bands_part(first, stop, worker):  # whole bands, all output channels
            for unit in units[first:stop]:
                transform_output(worker, transform_input(worker, *unit), *unit, 0, cout)

        if len(units) >= threads.num_threads():
            threads.parallel(bands_part, len(units))
        else:  # too few bands to share: split each band's input channels, then its output channels
            shared = self.scratch.get("winograd_v", (a * a * c * units[0][2] * tiles_w,))
            for unit in units:
                v = view(shared, a, a, c * unit[2] * tiles_w)
                threads.parallel(lambda first, stop, worker: transform_input(worker, *unit, first, stop, v), c,
                                 grain=WINOGRAD_SPLIT_CHANNELS)
                threads.parallel(lambda first, stop, worker: transform_output(worker, v.reshape(a * a, c, -1), *unit,
                                                                              first, stop), cout,
                                 grain=-(-threads.MIN_MACS // (a * a * c * unit[2] * tiles_w)))
        if not exact:  # the epilogue, once the overhanging tiles are cut off
            out[...] = whole[:, :, :ho, :wo]
            epilogue.apply(out)
