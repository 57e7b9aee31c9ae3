"""Depthwise convolution on the CPU: each output channel reads one input channel, through its own kh x kw kernel.

As im2col's GEMMs (kuiper/cpu/conv2d.py) such a layer is one product per channel of a 1 x kh*kw row of weights
by a column matrix of kh*kw rows: too thin for BLAS to run fast, and the column matrix is kh*kw copies of the
image. Here numpy's einsum sums the taps instead, multiplying and adding in one pass:

    out[c, y, x] = sum over (ky, kx) of w[c, ky, kx] * padded[c, y*sh + ky*dh, x*sw + kx*dw]

where every tap is a strided view of a padded copy of the input. einsum runs such a sum as nested loops over
the axes, and how it nests them decides its speed: each innermost loop has a fixed cost besides its work, so
it must be long; and left to itself (order="K") einsum puts innermost the axis whose steps are smallest, which
for x and kx, both one float along the same row, is a tie it breaks for kx: loops of kw iterations, several
times slower. Three layouts:

    depthwise_nchw   a copy of the padded input per kx, shifted by kx*dw columns and taken at the column
                     stride, laid out (kw, C, rows, Wo): kx then steps from copy to copy, and the innermost loop
                     is a channel's pixels, all rows of a band in one run at stride 1 (the weight a constant in
                     it). Each channel's sums stay in the cache through its taps. The output is written in place.
    depthwise_hcw    the padded rows laid out (rows, C * Wq): each row holds that row of every channel side by
                     side, so the innermost loop runs over all channels at once, long even for a 7x7 image whose
                     planes make loops of 49 pixels. The weights are broadcast along the rows once per input
                     width. order="F" nests einsum's loops by the output's axes instead (a row, the rows, then
                     the taps outermost), so the taps are views of the rows themselves, no copies. The sums are
                     copied to the output channel by channel.
    depthwise_hwc    the padded rows with the channels innermost, laid out (rows, Wp, C): every tap is one strided
                     view of them, strides and dilations included, and its weights a row of C floats, read along
                     the innermost loop, which runs over a part's channels. No column is computed only to be
                     dropped, as depthwise_hcw computes Wq - Wo of each row; the price is the transposing copies
                     in and out, which cost more than the sums save on large images of few channels.

depthwise_hcw takes a column stride by splitting the padded rows into sw phases (columns j*sw + px) as it
copies them: the taps of one phase are evenly spaced along its rows, one einsum per phase, the phases' sums
added. Columns past the output's width (Wq is the padded width over the stride, rounded up) are computed from
whatever follows them in the buffer and dropped. Rows strided by sh are strided views in every layout.

kuiper's threads split the channels (of all images at once); each part runs in bands of output rows whose
buffers take about BAND_BYTES, and adds the bias and runs the fused epilogue on each band as soon as it is
written. A channel multiplier (out = k * in channels, output channel o reading input channel o // k) is the
same sum over out channels, the copies repeating each input channel k times (in every layout).

docs/tuning.md keeps the measurements behind BAND_BYTES and GEMM_SPEEDUP.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiper.cpu import threads
from kuiper.cpu.scratch import view

#: the buffers of a band take about this much, per thread: they bound the memory for any image size, and
#: smaller bands cost more of einsum's loops (see Depthwise.plan)
BAND_BYTES = 4 << 20

#: BLAS's GEMMs run about this many times more multiply-adds per second than these forwards (copies and all):
#: a part worth handing to a thread, threads.MIN_MACS of GEMM work, needs threads.MIN_MACS / GEMM_SPEEDUP of them
GEMM_SPEEDUP = 32

#: names of the three layouts (see the module's docstring)
NCHW, HCW, HWC = "depthwise_nchw", "depthwise_hcw", "depthwise_hwc"
LAYOUTS = (NCHW, HCW, HWC)


class Depthwise:
    """A depthwise convolution's weights and geometry, and its forward in either layout.

    `weight` is (out_channels, 1, kh, kw); output channel o reads input channel o // multiplier. `bias` is
    (out_channels, 1, 1) or None. Work buffers come from `scratch`, the layer's (kuiper/cpu/scratch.py)."""

    def __init__(self, weight, bias, stride, dilation, pads, scratch):
        self.out_channels, _, self.kh, self.kw = weight.shape
        self.bias = bias
        self.stride, self.dilation, self.pads = stride, dilation, pads
        self.scratch = scratch
        self.taps = np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0))  # (kh, kw, C): a constant per channel
        self.row_taps = None  # depthwise_hcw's weights along the rows, for one input width (see _row_taps)
        # depthwise_hcw's column phases with the kx that read them: (phase, [kx, ...]), the kx evenly spaced
        phases = {}
        for kx in range(self.kw):
            phases.setdefault(kx * dilation[1] % stride[1], []).append(kx)
        self.phase_taps = sorted(phases.items())

    # ---- the split over threads and bands, shared by forward and workspace_bytes ---------------------
    def plan(self, layout: str, shape: tuple) -> tuple:
        """(grain, block, bands, sizes) for a (N, C, H, W) input: the least input channels per part, the most
        output channels a run holds (a part's channels of one image are cut into runs), the bands of output rows
        each run is cut into (top, height), and the floats of each buffer a thread keeps: (copies,) in NCHW,
        (padded rows, sums) in HCW and HWC, and in HCW the sums of later column phases when the taps fall in several.

        einsum's innermost loops have a fixed cost each besides their work: NCHW runs kh*kw of them per channel
        and band, so its runs hold whole images, as many channels as fit BAND_BYTES (rows are cut only for an
        image too large for one channel); HCW runs kh*kw per output row of each run, HWC kh*kw per output pixel,
        so there a run holds all of the part's channels, in bands of as many rows as fit."""
        n, cin, h, w = shape
        ho, wo = self.output_size(h, w)
        multiplier = self.out_channels // cin
        (sh, sw), (dh, dw) = self.stride, self.dilation
        unit = multiplier * ho * wo * self.kh * self.kw  # the multiply-adds of one input channel of one image
        grain = max(1, -(-max(1, threads.MIN_MACS // GEMM_SPEEDUP) // unit))
        parts = max(1, threads.parts(n * cin, grain))
        channels = min(cin, -(-n * cin // parts))  # the most input channels of one image a part gets
        wq, wp = self.row_width(w), w + sum(self.pads[1])
        partial = len(self.phase_taps) > 1  # HCW's second buffer of sums, for phases after the first
        # floats per output row of a band, per input channel: NCHW's copies of the input rows it needs (about sh);
        # HCW's padded rows and its sums; HWC's padded rows and its sums
        row = multiplier * {NCHW: sh * self.kw * wo, HCW: sh * sw * wq + (1 + partial) * wq, HWC: sh * wp + wo}[layout]
        if layout == NCHW:
            channels = max(1, min(channels, BAND_BYTES // (4 * row * ho)))
        rows = max(1, min(ho, BAND_BYTES // (4 * channels * row)))
        count = -(-ho // rows)
        heights = [ho // count + (i < ho % count) for i in range(count)]
        bands = [(sum(heights[:i]), heights[i]) for i in range(count)]
        span = (heights[0] - 1) * sh + (self.kh - 1) * dh + 1  # input rows of the tallest band
        block = channels * multiplier
        if layout == NCHW:
            return grain, block, bands, (self.kw * block * span * wo,)
        if layout == HWC:
            return grain, block, bands, (span * wp * block, heights[0] * wo * block)
        sums = heights[0] * block * wq
        # the taps read up to (kw-1)*dw // sw floats past the padded rows
        return grain, block, bands, (span * sw * block * wq + (self.kw - 1) * dw // sw + 1,) + (sums,) * (1 + partial)

    def output_size(self, h: int, w: int) -> tuple:
        (top, bottom), (left, right) = self.pads
        (sh, sw), (dh, dw) = self.stride, self.dilation
        return ((h + top + bottom - dh * (self.kh - 1) - 1) // sh + 1,
                (w + left + right - dw * (self.kw - 1) - 1) // sw + 1)

    def row_width(self, w: int) -> int:
        """Wq: the padded width over the column stride, rounded up (one phase's columns, depthwise_hcw)."""
        (left, right), sw = self.pads[1], self.stride[1]
        return -(-(w + left + right) // sw)

    def workspace_bytes(self, layout: str, shape: tuple) -> int:
        """What forward keeps in scratch for this input: each working thread's buffers, and in HCW the
        weights along the rows."""
        grain, _, _, sizes = self.plan(layout, shape)
        workers = max(1, threads.parts(shape[0] * shape[1], grain))
        weights = self.kh * self.kw * self.out_channels * self.row_width(shape[3]) if layout == HCW else 0
        return 4 * (workers * sum(sizes) + weights)

    # ---- forward ----------------------------------------------------------------------------------------
    def forward(self, layout: str, x, out, epilogue) -> None:
        """out = the convolution of x (both (N, C, H, W)), plus the bias, then the epilogue, band by band."""
        n, cin = x.shape[:2]
        grain, block, bands, sizes = self.plan(layout, x.shape)
        run = {NCHW: self._nchw, HCW: self._hcw, HWC: self._hwc}[layout]
        multiplier = self.out_channels // cin
        weights = self._row_taps(x.shape[3]) if layout == HCW else None

        def part(first, stop, worker):
            """Input channels first..stop-1 of all images together (unit = item * C + channel), in runs of at
            most `block` channels of one image: a part that runs inline (a nested forward) gets them all."""
            buffers = [self.scratch.get(f"depthwise_{name}{worker}", (size,)) for name, size in zip("abc", sizes)]
            unit = first
            while unit < stop:
                item, g0 = divmod(unit, cin)
                g1 = min(cin, g0 + stop - unit, g0 + block // multiplier)
                for top, height in bands:
                    run(x, out, epilogue, item, g0, g1, multiplier, top, height, buffers, weights)
                unit += g1 - g0

        threads.parallel(part, n * cin, grain)

    def _rows(self, top: int, height: int, h: int) -> tuple:
        """The padded input rows a band of output rows reads, from row top*sh on: (count, a, b, above, below), the
        rows that hold the image being [a, b) in the input's own rows, [above, below) among the band's."""
        (sh, dh), pad = (self.stride[0], self.dilation[0]), self.pads[0][0]
        first = top * sh
        count = (height - 1) * sh + (self.kh - 1) * dh + 1
        a, b = max(first, pad) - pad, min(first + count, pad + h) - pad
        return count, a, b, a + pad - first, b + pad - first

    def _store(self, sums, out, epilogue, item, c0, c1, top, height) -> None:
        """Write a band's sums, (channels, rows, Wo) as laid out in any way, to the output with the bias added,
        then run the epilogue on that band."""
        band = out[item, c0:c1, top:top + height]
        if self.bias is None:
            np.copyto(band, sums)
        else:
            np.add(sums, self.bias[c0:c1], out=band)
        epilogue.apply(band, (item, slice(c0, c1), slice(top, top + height)))

    def _nchw(self, x, out, epilogue, item, g0, g1, multiplier, top, height, buffers, weights):
        """Input channels g0..g1-1 of image `item`, output rows top..top+height-1, in NCHW (see the module)."""
        (sh, sw), (dh, dw) = self.stride, self.dilation
        left = self.pads[1][0]
        h, w = x.shape[2:]
        wo = out.shape[3]
        c0, c1 = g0 * multiplier, g1 * multiplier
        count, a, b, above, below = self._rows(top, height, h)
        # copy kx: shifted[kx, c, r, j] = padded[c, top*sh + r, j*sw + kx*dw], the padding written as zeros
        shifted = view(buffers[0], self.kw, c1 - c0, count, wo)
        grouped = shifted.reshape(self.kw, g1 - g0, multiplier, count, wo)
        shifted[:, :, :max(0, above)] = 0
        shifted[:, :, max(0, below):] = 0
        for kx in range(self.kw):
            j0 = max(0, -(-(left - kx * dw) // sw))
            j1 = min(wo, (w - 1 + left - kx * dw) // sw + 1)
            shifted[kx, :, above:below, :j0] = 0
            shifted[kx, :, above:below, max(j0, j1):] = 0
            if j1 > j0 and b > a:
                start = j0 * sw + kx * dw - left
                columns = slice(start, start + (j1 - j0 - 1) * sw + 1, sw)
                grouped[kx, :, :, above:below, j0:j1] = x[item, g0:g1, None, a:b, columns]
        band = out[item, c0:c1, top:top + height]
        s_kx, s_c, s_r, s_j = shifted.strides
        if sh == 1:  # a band's rows are one run of pixels per channel, in the copies and in the output
            pixels = band.reshape(c1 - c0, height * wo)  # a view: the output is contiguous
            v = as_strided(shifted, (self.kh, self.kw, c1 - c0, height * wo), (dh * s_r, s_kx, s_c, s_j))
            np.einsum("yxcq,yxc->cq", v, self.taps[:, :, c0:c1], out=pixels)
        else:
            v = as_strided(shifted, (self.kh, self.kw, c1 - c0, height, wo), (dh * s_r, s_kx, s_c, sh * s_r, s_j))
            np.einsum("yxchw,yxc->chw", v, self.taps[:, :, c0:c1], out=band)
        if self.bias is not None:
            band += self.bias[c0:c1]
        epilogue.apply(band, (item, slice(c0, c1), slice(top, top + height)))

    def _row_taps(self, w: int) -> np.ndarray:
        """The weights along depthwise_hcw's rows: taps[ky, kx, c*Wq + j] = w[c, ky, kx] for every column j,
        made once per input width, kept in scratch."""
        wq = self.row_width(w)
        taps = self.scratch.get("depthwise_taps", (self.kh, self.kw, self.out_channels, wq))
        if taps is not self.row_taps:  # a new buffer (new width): fill it
            taps[...] = self.taps[:, :, :, None]
            self.row_taps = taps
        return taps.reshape(self.kh, self.kw, -1)

    def _hcw(self, x, out, epilogue, item, g0, g1, multiplier, top, height, buffers, weights):
        """The same in HCW, `weights` along the rows (_row_taps)."""
        (sh, sw), (dh, dw) = self.stride, self.dilation
        left = self.pads[1][0]
        h, w = x.shape[2:]
        wo = out.shape[3]
        wq = self.row_width(w)
        c0, c1 = g0 * multiplier, g1 * multiplier
        width = (c1 - c0) * wq  # a row of all the part's channels
        count, a, b, above, below = self._rows(top, height, h)
        # padded rows split into sw phases: phases[r, px, c, j] = padded[c, top*sh + r, j*sw + px]
        phases = view(buffers[0], count, sw, c1 - c0, wq)
        grouped = phases.reshape(count, sw, g1 - g0, multiplier, wq)
        phases[:max(0, above)] = 0
        phases[max(0, below):] = 0
        image = x[item, g0:g1, a:b].transpose(1, 0, 2)[:, :, None]  # (rows, channels, 1, W)
        for px in range(sw):
            j0 = max(0, -(-(left - px) // sw))
            j1 = min(wq, (w - 1 + left - px) // sw + 1)
            phases[above:below, px, :, :j0] = 0
            phases[above:below, px, :, max(j0, j1):] = 0
            if j1 > j0 and b > a:
                start = j0 * sw + px - left
                grouped[above:below, px, :, :, j0:j1] = image[..., start:start + (j1 - j0 - 1) * sw + 1:sw]
        # tap (ky, kx) of output row y reads phases[y*sh + ky*dh, kx*dw % sw, c, j + kx*dw // sw]: columns j >= Wo
        # read the next channel's first ones (or the buffer's spare floats), and are dropped. The taps of one phase
        # are views of its rows, evenly spaced along them: one einsum each, the phases' sums added up
        sums = view(buffers[1], height, width)
        for i, (phase, taps) in enumerate(self.phase_taps):
            step = taps[1] - taps[0] if len(taps) > 1 else 1
            v = as_strided(buffers[0][phase * width + taps[0] * dw // sw:], (self.kh, len(taps), height, width),
                           (4 * dh * sw * width, 4 * (step * dw // sw), 4 * sh * sw * width, 4))
            target = view(buffers[2], height, width) if i else sums
            # einsum's loops run in the order of the output's axes, first innermost (order="F"): a row of all
            # channels, the rows, then the taps. Left to order them by their steps, it would keep kx innermost
            np.einsum("yxhm,yxm->mh", v, weights[:, taps[0]:taps[-1] + 1:step, c0 * wq:c1 * wq], out=target.T,
                      order="F")
            if i:
                sums += target
        self._store(sums.reshape(height, c1 - c0, wq)[:, :, :wo].transpose(1, 0, 2), out, epilogue, item, c0, c1,
                    top, height)

    def _hwc(self, x, out, epilogue, item, g0, g1, multiplier, top, height, buffers, weights):
        """The same in HWC: the padded rows with the channels innermost (see the module)."""
        (sh, sw), (dh, dw) = self.stride, self.dilation
        left, right = self.pads[1]
        h, w = x.shape[2:]
        wo = out.shape[3]
        c0, c1 = g0 * multiplier, g1 * multiplier
        count, a, b, above, below = self._rows(top, height, h)
        # padded[r, j, c] = padded[c // multiplier, top*sh + r, j], each input channel repeated `multiplier` times
        padded = view(buffers[0], count, w + left + right, c1 - c0)
        padded[:max(0, above)] = 0
        padded[max(0, below):] = 0
        padded[:, :left] = 0
        padded[:, left + w:] = 0
        if b > a:
            grouped = padded.reshape(count, w + left + right, g1 - g0, multiplier)
            grouped[above:below, left:left + w] = x[item, g0:g1, a:b].transpose(1, 2, 0)[..., None]
        # tap (ky, kx) of output pixel (y, j) reads padded[y*sh + ky*dh, j*sw + kx*dw]: a view of all channels at
        # once, so einsum's innermost loop runs over the channels, with the weights of the tap along it
        s_r, s_j, s_c = padded.strides
        v = as_strided(padded, (self.kh, self.kw, height, wo, c1 - c0), (dh * s_r, dw * s_j, sh * s_r, sw * s_j, s_c))
        sums = view(buffers[1], height, wo, c1 - c0)
        np.einsum("yxhwc,yxc->hwc", v, self.taps[:, :, c0:c1], out=sums)
        self._store(sums.transpose(2, 0, 1), out, epilogue, item, c0, c1, top, height)
