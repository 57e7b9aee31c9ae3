"""Conv2d on CPUs as the product of output pixels by output channels (cl/conv_pixels.cl).

gemm_cpu's taps variants (kuiper/opencl/gemm.py) compute output channels x pixels in blocks of 32 pixels along
a padded grid of the image, padding columns and all: ResNet-18's 7x7 layers compute 64 columns for their 49
pixels. conv_pixels turns the product round: a block is MB output pixels, anywhere in the image, by NV vectors
of 16 output channels, read from the weights repacked in panels of NB = 16 NV channels. The input is the taps
variants' own: pad_planes' padded copy and the taps table (Conv2d.padded_taps).

Each block size is a variant, "pixels MBxNB". The rule takes them on CPUs for ungrouped convolutions wherever
the taps variants would run, and for 3x3 stride-1 layers where Winograd's F(4x4) has few tiles; docs/tuning.md
keeps the measurements behind the thresholds below.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from kuiper.core.winograd import F4
from kuiper.core.variants import Variant

#: the blocks, (pixel rows MB, vectors of 16 output channels NV), widest first: 5 x 64 keeps 20 accumulators and
#: 4 weight vectors in registers, 7 x 32 14 and 2
BLOCKS = ((5, 4), (7, 2))
#: the rule takes the widest block whose panels compute at most this share more channels than the layer has
CHANNEL_SLACK = 1 / 8
#: a work-item computes a run of at most this many pixel blocks for one panel, K in chunks of CHUNK_K: each chunk
#: of the panel comes from memory once and serves every block of the run from the cache, where block by block
#: each block's first pass waited on the panel streaming from memory (ResNet-18's 7x7 layers, docs/tuning.md).
#: RUN * MB stays a multiple of 16: the kernel reads a run's sums 16 pixels at a time
RUN = 16
CHUNK_K = 32
#: ... runs as short as give every core this many work-items
ITEMS_PER_CORE = 4
#: ... and only for K = Cin kh kw of this many or more: a network's first layer (3 channels in: K = 27 for 3x3,
#: 147 for 7x7) has too short a loop for the blocks' sums and stores, and keeps the taps variants
MIN_K = 256
#: 3x3 stride-1 layers run Winograd's F(4x4) (kuiper/opencl/winograd.py) from this many tiles (of every batch
#: item) up, where its GEMMs are wide enough: ResNet-18's 28x28 and 56x56 layers at batch 1, not its 14x14 ones
WINOGRAD_TILES = 32


def name(block: tuple) -> str:
    mb, nv = block
    return f"pixels {mb}x{16 * nv}"


class PixelConv:
    """One Conv2d layer's conv_pixels forward on one runtime (a CPU): `variants`, one per block of BLOCKS, each
    built with its kernel and the weights packed in its panels."""

    file = "conv_pixels.cl"

    def __init__(self, rt, layer):
        self.rt = rt
        self.layer = layer
        self.variants = [Variant(name(block), partial(self.build, block), self) for block in BLOCKS]

    def preferred(self, shapes) -> str | None:
        """The variant the rule picks for these input shapes, or None: where the taps variants apply (the
        layer's gemm_dims gives their row) and K is MIN_K or more, unless Winograd has WINOGRAD_TILES or more;
        the widest block of little slack (CHANNEL_SLACK), none where every block has more."""
        layer = self.layer
        if not layer.gemm_dims(shapes)[3] or layer.w_gemm.shape[2] < MIN_K:
            return None
        if layer.winograd is not None:
            out = layer.output_shapes(shapes)[0]
            if math.prod(out[:-3]) * math.prod(F4.tiles(*out[-2:])) >= WINOGRAD_TILES:
                return None
        cout = layer.out_channels
        fits = [block for block in BLOCKS if -(-cout // (16 * block[1])) * 16 * block[1] <= cout * (1 + CHANNEL_SLACK)]
        return name(fits[0]) if fits else None

    def build(self, block: tuple) -> tuple:
        """The kernel for `block` and the weights in its panels: (Cout / NB, K, NB), the missing channels 0."""
        mb, nv = block
        nb, (cout, k) = 16 * nv, self.layer.w_gemm.shape[1:]
        panels = np.zeros((-(-cout // nb) * nb, k), np.float32)
        panels[:cout] = self.layer.w_gemm[0]
        panels = panels.reshape(-1, nb, k).transpose(0, 2, 1)
        kernel = self.rt.kernel(self.file, "conv_pixels", [f"-DMB={mb}", f"-DNV={nv}", f"-DRUN={RUN}",
                                                           f"-DKC={CHUNK_K}", *self.layer.cl_epilogue.options])
        return kernel, self.rt.upload(np.ascontiguousarray(panels)), mb, nb

    def __call__(self, q, built: tuple, x, y, bias, epilogue: tuple) -> None:
        """Enqueue y = the convolution of x: device tensors (N, Cin, H, W) and (N, Cout, Ho, Wo), with one
        variant (build's)."""
        kernel, panels, mb, nb = built
        layer, (ho, wo) = self.layer, y.shape[-2:]
        cout, k = layer.out_channels, layer.w_gemm.shape[2]
        items = x.size // (layer.in_channels * math.prod(x.shape[-2:]))
        padded, taps, phase_w, plane = layer.padded_taps(q, x, items)
        blocks, panel_count = -(-ho * wo // mb), -(-cout // nb)
        runs = max(-(-ITEMS_PER_CORE * self.rt.device.max_compute_units // (panel_count * items)), -(-blocks // RUN))
        run = -(-blocks // runs)
        q.run(kernel, (-(-blocks // run), panel_count, items), (1, 1, 1), y.buffer, padded, taps, panels,
              panels if bias is None else bias, int(bias is not None), *epilogue, cout, k, ho * wo, wo, phase_w,
              layer.in_channels * plane, run)
