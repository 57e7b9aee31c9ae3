"""Winograd's F(4x4, 3x3) on OpenCL (cl/winograd.cl): a 3x3 stride-1 convolution in a quarter of the multiply-adds;
and F(2x2, 3x3) for tensor cores.

The method and its matrices are kuiper/core/winograd.py's. On OpenCL it runs in three launches: the input
transform writes every tile's B^T d B, one stacked GEMM (kuiper/opencl/gemm.py) multiplies the transformed
kernels into them for each of the 36 positions of a 6x6 tile, and the output transform turns each tile's 36
sums into its 4x4 outputs, adding the bias and applying the layer's fused epilogue as it stores them. On CPUs
a large layer goes through them a chunk of tile rows at a time (CHUNK_BYTES), and a chunk of few tiles has its
products computed by conv_pixels (PIXELS_MAX_TILES), its tiles in the place of a convolution's pixels.

The GEMM's operands are float at any storage precision (see cl/winograd.cl), so it runs on the runtime's fp32
view. F(2x2, 3x3) is a variant too ("winograd F2"): its transforms only add and subtract, so its transformed
tiles may be stored at the runtime's precision, and its GEMM then runs at that precision: on tensor cores
(gemm_mma) at fp16 and tf32, where the rule takes it for large layers. It does 4/9 of im2col's multiplies to
F(4x4)'s 1/4, but tensor cores multiply many times faster than the CUDA cores F(4x4)'s float GEMM runs on.

Where a direct convolution's GEMM has few columns (a 7x7 image: 49 per item), this one has one per tile of the
whole batch, and K = Cin rather than 9 Cin: at batch 32, ResNet-18's 3x3 layers become GEMMs of
(Cout, Cin) @ (Cin, 128 to 6272 tiles), 36 of them in one launch.

docs/tuning.md keeps the measurements behind the thresholds below.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kuiper.core.winograd import F2, F4, Winograd
from kuiper.opencl import conv_pixels
from kuiper.opencl.gemm import Gemm, Matrix
from kuiper.opencl.runtime import round_up
from kuiper.core.variants import Variant

#: the rule's threshold on GPUs: a convolution with fewer multiply-adds runs direct. Winograd's three launches
#: cost more host time than one, and a small layer gains little device time (ResNet-18's 3x3 layers at batch
#: 1 have 116 M each)
MIN_MACS = 256 << 20
#: the rule's threshold on CPUs: a GEMM with fewer columns (tiles) than gemm_cpu's 16-wide block runs its
#: narrow blocks, slower than the direct convolution
MIN_CPU_TILES = 16
#: ... and fewer input channels: the transforms then cost more than the GEMM saves (a network's first layer)
MIN_CPU_CHANNELS = 16

#: on CPUs, a chunk of fewer tiles than this has its a*a products computed by conv_pixels (kuiper/opencl/
#: conv_pixels.py), tiles as its pixels: gemm_cpu's blocks of 32 tiles compute 64 for a 28x28 image's 49
PIXELS_MAX_TILES = 64
#: work-items per work-group along the tiles on GPUs (CPUs let the driver choose)
GROUP_TILES = 64
#: tiles a work-item of the rows variant transforms (RUN in cl/winograd.cl)
RUN = 4
#: on CPUs, a layer goes through the three launches a chunk of tile rows (of the whole batch's) at a time whose
#: transformed tiles (V and M) hold about this many bytes, so that the GEMM and the output transform find them
#: in the cache: unchunked, ResNet-18's first layers at batch 8 make 29 MB of them, and MaxViT's 64-channel
#: layer at 112x112 14 MB at batch 1. Intel's runtime gains from it; PoCL neither gains nor loses.
CHUNK_BYTES = 4 << 20
#: ... but at least this many tiles a chunk: narrower GEMMs lose more than the cache saves
MIN_CHUNK_TILES = 128


#: the variants' names: F(4x4) a work-item per tile and channel, the same a run of RUN tiles (CPUs), and F(2x2)
#: with its tiles and GEMM at the runtime's precision
FLAT, ROWS, STORED = "winograd F4", "winograd F4 rows", "winograd F2"


def applies(layer) -> bool:
    """Whether a Conv2d layer is a convolution Winograd's F(m x m, 3x3) computes: 3x3, stride 1, undilated,
    ungrouped."""
    return (layer.kernel_size == (3, 3) and layer.stride == (1, 1) and layer.dilation == (1, 1)
            and layer.groups == 1)


def entries(matrix) -> str:
    """A matrix's entries, row by row, as an OpenCL initializer list (exact: they are small dyadic fractions)."""
    return ",".join(f"{float(v)!r}f" for v in matrix.ravel())


class Built(NamedTuple):
    """What one variant runs: its method, its input and output kernels, whether they are the _rows ones, its
    GEMM and the transformed weights, and the bytes of one transformed tile's element (4, or 2 stored as half)."""

    method: Winograd
    input: object
    output: object
    rows: bool
    gemm: Gemm
    weight: object
    element: int


class WinogradConv:
    """One Conv2d layer's Winograd forward on one runtime: its transformed weights, its kernels (built with the
    layer's epilogue) and its GEMM; the transformed tiles go in the runtime's scratch (Enqueuer.scratch).
    `variants` are it as the layer's variants (kuiper/core/variants.py), built from `file`: "winograd F4", a
    work-item per tile and channel; on CPUs "winograd F4 rows", a work-item per run of RUN tiles of a tile
    row and channel; and "winograd F2", a work-item per tile and channel, its tiles and GEMM at the runtime's
    precision."""

    file = "winograd.cl"

    def __init__(self, rt, layer):
        self.rt = rt
        self.layer = layer
        self.gemm = Gemm(rt.at_precision("fp32"))
        self.stored_gemm = Gemm(rt)  # F(2x2)'s, at the runtime's precision
        self.weights = {}  # (method, its GEMM's runtime) -> the transformed weights there, shared by variants
        self.pixels = {}  # method.m -> its products on conv_pixels (CPUs, _pixels)
        self.tap_rows = {}  # tiles a chunk -> conv_pixels' taps table for V (CPUs)
        self.variants = [Variant(FLAT, lambda: self.build(F4, ""), self),
                         *([Variant(ROWS, lambda: self.build(F4, "_rows"), self)] if rt.is_cpu else []),
                         Variant(STORED, lambda: self.build(F2, "", stored=True), self)]

    def candidates(self, shapes) -> list:
        """Every variant runs every input shape of the layer."""
        return [v.name for v in self.variants]

    def preferred(self, shapes) -> str | None:
        """The variant the rule picks for these input shapes, or None for none of Winograd's: on CPUs where the
        GEMM has MIN_CPU_TILES columns or more and the layer MIN_CPU_CHANNELS input channels, on GPUs for layers
        of MIN_MACS or more: F(2x2) where its GEMM runs on tensor cores, else F(4x4). On CPUs the rows variant,
        unless the compiler says it targets AVX-512 (PoCL there merges the tile kernels into 16-lane vectors
        that beat it; cl/winograd.cl)."""
        out = self.layer.output_shapes(shapes)[0]
        if self.rt.is_cpu:
            tiles = math.prod(out[:-3]) * math.prod(F4.tiles(*out[-2:]))  # of every batch item
            if tiles < MIN_CPU_TILES or self.layer.in_channels < MIN_CPU_CHANNELS:
                return None
            return FLAT if "avx512f" in self.rt.target_features else ROWS
        if math.prod(out) * self.layer.in_channels * 9 < MIN_MACS:
            return None
        return STORED if self.stored_gemm.mma else FLAT

    def build(self, method: Winograd, kind: str, stored: bool = False) -> Built:
        """One variant: the input and output kernels (kind "" or "_rows", their names' ending), their GEMM and
        the transformed weights (G g G^T, shaped (a*a, Cout, Cin)); with `stored`, the transformed tiles at the
        runtime's precision (-DSTORED_TILES) and the GEMM at it too."""
        options = [f"-DWM={method.m}", f"-DWINO_BT={entries(method.bt)}", f"-DWINO_AT={entries(method.at)}",
                   *(["-DSTORED_TILES"] if stored else []), *self.layer.cl_epilogue.options]
        gemm = self.stored_gemm if stored else self.gemm
        key = (method.m, gemm.rt.precision)
        if key not in self.weights:
            self.weights[key] = gemm.rt.upload(method.transform_kernel(self.layer.w_kernel))
        weight = self.weights[key]
        return Built(method, self.rt.kernel(self.file, f"winograd_input{kind}", options),
                     self.rt.kernel(self.file, f"winograd_output{kind}", options), bool(kind), gemm, weight,
                     gemm.rt.storage.itemsize if stored else 4)

    def chunk(self, rows: int, row_tiles: int, method: Winograd = F4) -> int:
        """Tile rows a chunk on CPUs, of `rows` of row_tiles tiles each (see CHUNK_BYTES), the chunks as even as
        they can be."""
        layer, positions = self.layer, method.a * method.a
        fit = CHUNK_BYTES // (4 * positions * (layer.in_channels + layer.out_channels) * row_tiles)
        fit = max(1, fit, -(-MIN_CHUNK_TILES // row_tiles))
        return -(-rows // -(-rows // fit))

    def __call__(self, q, built: Built, x, y, bias, epilogue: tuple) -> None:
        """Enqueue y = the convolution of x: device tensors (N, Cin, H, W) and (N, Cout, Ho, Wo), with one
        variant (build's)."""
        layer, method, rows = self.layer, built.method, built.rows
        (h, w), (ho, wo) = x.shape[-2:], y.shape[-2:]
        cin, cout = layer.in_channels, layer.out_channels
        (top, _), (left, _) = layer.pads
        tiles_h, tiles_w = method.tiles(ho, wo)
        items = x.size // (cin * h * w)
        positions = method.a * method.a
        tile_rows = items * tiles_h
        # GPUs: every tile in one launch
        count = self.chunk(tile_rows, tiles_w, method) if self.rt.is_cpu else tile_rows
        v = q.scratch("winograd tiles", built.element * positions * cin * count * tiles_w)
        m = q.scratch("winograd sums", built.element * positions * cout * count * tiles_w)
        for first in range(0, tile_rows, count):
            chunk = min(count, tile_rows - first)
            tiles = chunk * tiles_w
            if rows:  # one work-item per run of tiles
                local, width = None, chunk * -(-tiles_w // RUN)
            else:
                local = None if self.rt.is_cpu else GROUP_TILES
                width = tiles if local is None else round_up(tiles, local)
            q.run(built.input, (width, cin), local and (local, 1), v, x.buffer, cin, h, w, top, left, tiles_h,
                  tiles_w, tiles, first)
            pixels = self._pixels(built) if self.rt.is_cpu and tiles < PIXELS_MAX_TILES else None
            if pixels is not None:
                self._pixels_gemm(q, pixels, m, v, tiles, positions)
            else:
                built.gemm(q, cout, tiles, cin, c=Matrix(m, tiles, group=cout * tiles),
                           a=Matrix(built.weight, cin, group=cout * cin), b=Matrix(v, tiles, group=cin * tiles),
                           groups=positions)
            q.run(built.output, (width, cout), local and (local, 1), y.buffer, m,
                  x.buffer if bias is None else bias, int(bias is not None), *epilogue, cout, ho, wo, tiles_h,
                  tiles_w, tiles, first)

    def _pixels(self, built: Built) -> tuple | None:
        """The products of a float-tile variant as conv_pixels runs them (its kernel, the transformed weights in
        its panels, its block, one position's panels' elements), made on first need; None for F(2x2)'s stored
        tiles (their own GEMM) or where no block fits Cout."""
        block = conv_pixels.fitting_block(self.layer.out_channels)
        if built.gemm is not self.gemm or block is None:
            return None
        key = built.method.m
        if key not in self.pixels:
            packed = conv_pixels.panels(built.method.transform_kernel(self.layer.w_kernel), block)
            self.pixels[key] = (conv_pixels.kernel(self.gemm.rt, block), self.gemm.rt.upload(packed), block,
                                packed[0].size)
        return self.pixels[key]

    def _pixels_gemm(self, q, pixels: tuple, m, v, tiles: int, positions: int) -> None:
        """M = U @ V for every tile position by conv_pixels: position p is item p, its image V's (Cin, tiles)
        rows, which the taps table lists one row of `tiles` after another, its panels U's (Cout, Cin)."""
        kernel, weights, block, panels_item = pixels
        cin, cout = self.layer.in_channels, self.layer.out_channels
        if tiles not in self.tap_rows:
            self.tap_rows[tiles] = self.gemm.rt.upload((np.arange(cin) * tiles).astype(np.int32))
        conv_pixels.enqueue(q, kernel, block, m, v, self.tap_rows[tiles], weights, None, (m, 0.0, 0.0), cout, cin,
                            tiles, tiles, tiles, positions, cin * tiles, panels_item)
