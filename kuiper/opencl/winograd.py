"""Winograd's F(4x4, 3x3) on OpenCL (cl/winograd.cl): a 3x3 stride-1 convolution in a quarter of the multiply-adds.

The method and its matrices are kuiper/core/winograd.py's. On OpenCL it runs in three launches: the input
transform writes every tile's B^T d B, one stacked GEMM (kuiper/opencl/gemm.py) multiplies the transformed
kernels into them for each of the 36 positions of a 6x6 tile, and the output transform turns each tile's 36
sums into its 4x4 outputs, adding the bias and applying the layer's fused epilogue as it stores them. On CPUs
a large layer goes through them a chunk of tile rows at a time (CHUNK_BYTES).

The GEMM's operands are float at any storage precision (see cl/winograd.cl), so it runs on the runtime's fp32
view. Where a direct convolution's GEMM has few columns (a 7x7 image: 49 per item), this one has one per tile
of the whole batch, and K = Cin rather than 9 Cin: at batch 32, ResNet-18's 3x3 layers become GEMMs of
(Cout, Cin) @ (Cin, 128 to 6272 tiles), 36 of them in one launch.

docs/tuning.md keeps the measurements behind the thresholds below.
"""

from __future__ import annotations

import math

from kuiper.core.winograd import F4
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


def applies(layer) -> bool:
    """Whether a Conv2d layer is a convolution Winograd's F(m x m, 3x3) computes: 3x3, stride 1, undilated,
    ungrouped."""
    return (layer.kernel_size == (3, 3) and layer.stride == (1, 1) and layer.dilation == (1, 1)
            and layer.groups == 1)


def entries(matrix) -> str:
    """A matrix's entries, row by row, as an OpenCL initializer list (exact: they are small dyadic fractions)."""
    return ",".join(f"{float(v)!r}f" for v in matrix.ravel())


class WinogradConv:
    """One Conv2d layer's Winograd forward on one runtime: its transformed weights, its kernels (built with the
    layer's epilogue) and its GEMM; the transformed tiles go in the runtime's scratch (Enqueuer.scratch).
    `variants` are it as the layer's variants (kuiper/core/variants.py), built from `file`: "winograd F4", a
    work-item per tile and channel, and on CPUs "winograd F4 rows", a work-item per run of RUN tiles of a tile
    row and channel."""

    method = F4
    file = "winograd.cl"

    def __init__(self, rt, layer):
        self.rt = rt
        self.layer = layer
        self.gemm = Gemm(rt.at_precision("fp32"))
        self.weight = None
        name = f"winograd F{self.method.m}"
        self.variants = [Variant(name, lambda: self.build(""), self)]
        if rt.is_cpu:
            self.variants.append(Variant(f"{name} rows", lambda: self.build("_rows"), self))

    def preferred(self, shapes) -> str | None:
        """The variant the rule picks for these input shapes, or None for none of Winograd's: on CPUs where the
        GEMM has MIN_CPU_TILES columns or more and the layer MIN_CPU_CHANNELS input channels, on GPUs for layers
        of MIN_MACS or more. On CPUs the rows variant, unless the compiler says it targets AVX-512 (PoCL there
        merges the tile kernels into 16-lane vectors that beat it; cl/winograd.cl)."""
        out = self.layer.output_shapes(shapes)[0]
        flat, *rows = self.variants
        if self.rt.is_cpu:
            tiles = math.prod(out[:-3]) * math.prod(self.method.tiles(*out[-2:]))  # of every batch item
            if tiles < MIN_CPU_TILES or self.layer.in_channels < MIN_CPU_CHANNELS:
                return None
            return flat.name if "avx512f" in self.rt.target_features else rows[0].name
        return flat.name if math.prod(out) * self.layer.in_channels * 9 >= MIN_MACS else None

    def build(self, kind: str) -> tuple:
        """The input and output kernels of one variant (kind "" or "_rows", their names' ending) and the
        transformed weights (G g G^T, shaped (36, Cout, Cin)), made once for both."""
        method = self.method
        options = [f"-DWM={method.m}", f"-DWINO_BT={entries(method.bt)}", f"-DWINO_AT={entries(method.at)}",
                   *self.layer.cl_epilogue.options]
        if self.weight is None:
            self.weight = self.gemm.rt.upload(method.transform_kernel(self.layer.w_kernel))
        return (self.rt.kernel(self.file, f"winograd_input{kind}", options),
                self.rt.kernel(self.file, f"winograd_output{kind}", options), bool(kind))

    def chunk(self, rows: int, row_tiles: int) -> int:
        """Tile rows a chunk on CPUs, of `rows` of row_tiles tiles each (see CHUNK_BYTES), the chunks as even as
        they can be."""
        layer, positions = self.layer, self.method.a * self.method.a
        fit = CHUNK_BYTES // (4 * positions * (layer.in_channels + layer.out_channels) * row_tiles)
        fit = max(1, fit, -(-MIN_CHUNK_TILES // row_tiles))
        return -(-rows // -(-rows // fit))

    def __call__(self, q, kernels: tuple, x, y, bias, epilogue: tuple) -> None:
        """Enqueue y = the convolution of x: device tensors (N, Cin, H, W) and (N, Cout, Ho, Wo), with one
        variant's kernels (build's)."""
        method, layer = self.method, self.layer
        input_kernel, output_kernel, rows = kernels
        (h, w), (ho, wo) = x.shape[-2:], y.shape[-2:]
        cin, cout = layer.in_channels, layer.out_channels
        (top, _), (left, _) = layer.pads
        tiles_h, tiles_w = method.tiles(ho, wo)
        items = x.size // (cin * h * w)
        positions = method.a * method.a
        tile_rows = items * tiles_h
        count = self.chunk(tile_rows, tiles_w) if self.rt.is_cpu else tile_rows  # GPUs: every tile in one launch
        v = q.scratch("winograd tiles", 4 * positions * cin * count * tiles_w)
        m = q.scratch("winograd sums", 4 * positions * cout * count * tiles_w)
        for first in range(0, tile_rows, count):
            chunk = min(count, tile_rows - first)
            tiles = chunk * tiles_w
            if rows:  # one work-item per run of tiles
                local, width = None, chunk * -(-tiles_w // RUN)
            else:
                local = None if self.rt.is_cpu else GROUP_TILES
                width = tiles if local is None else round_up(tiles, local)
            q.run(input_kernel, (width, cin), local and (local, 1), v, x.buffer, cin, h, w, top, left, tiles_h,
                  tiles_w, tiles, first)
            self.gemm(q, cout, tiles, cin, c=Matrix(m, tiles, group=cout * tiles),
                      a=Matrix(self.weight, cin, group=cout * cin), b=Matrix(v, tiles, group=cin * tiles),
                      groups=positions)
            q.run(output_kernel, (width, cout), local and (local, 1), y.buffer, m,
                  x.buffer if bias is None else bias, int(bias is not None), *epilogue, cout, ho, wo, tiles_h,
                  tiles_w, tiles, first)
