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


def fitting_block(channels: int) -> tuple | None:
    """The widest of BLOCKS whose panels compute at most CHANNEL_SLACK more channels than `channels`, or None."""
    return next((block for block in BLOCKS
                 if -(-channels // (16 * block[1])) * 16 * block[1] <= channels * (1 + CHANNEL_SLACK)), None)


def kernel(rt, block: tuple, options=()):
    """conv_pixels built for `block` (MB pixel rows, NV vectors of 16 channels) on `rt`, with `options` (an
    epilogue's)."""
    mb, nv = block
    return rt.kernel(PixelConv.file, "conv_pixels", [f"-DMB={mb}", f"-DNV={nv}", f"-DRUN={RUN}", f"-DKC={CHUNK_K}",
                                                     *options])


def panels(weights: np.ndarray, block: tuple) -> np.ndarray:
    """Weights (..., Cout, K) as conv_pixels reads them: (..., Cout / NB, K, NB), the missing channels 0."""
    nb, (*stack, cout, k) = 16 * block[1], weights.shape
    padded = np.zeros((*stack, -(-cout // nb) * nb, k), np.float32)
    padded[..., :cout, :] = weights
    return np.ascontiguousarray(padded.reshape(*stack, -1, nb, k).swapaxes(-1, -2))


def enqueue(q, kernel, block: tuple, y, image, taps, panels, bias, epilogue: tuple, channels: int, k: int,
            pixels: int, out_w: int, phase_w: int, items: int, image_item: int, panels_item: int = 0):
    """Enqueue conv_pixels on `items` products of (pixels x K) @ (K x channels), each item's image image_item
    and its panels panels_item elements after the last's (see cl/conv_pixels.cl), in runs that give every core
    ITEMS_PER_CORE work-items where there are enough blocks."""
    mb, nb = block[0], 16 * block[1]
    blocks, panel_count = -(-pixels // mb), -(-channels // nb)
    cores = q.runtime.device.max_compute_units
    runs = max(-(-ITEMS_PER_CORE * cores // (panel_count * items)), -(-blocks // RUN))
    run = -(-blocks // runs)
    return q.run(kernel, (-(-blocks // run), panel_count, items), (1, 1, 1), y, image, taps, panels,
                 panels if bias is None else bias, int(bias is not None), *epilogue, channels, k, pixels, out_w,
                 phase_w, image_item, panels_item, run)


class PixelConv:
    """One Conv2d layer's conv_pixels forward on one runtime (a CPU): `variants`, one per block of BLOCKS, each
    built with its kernel and the weights packed in its panels."""

    file = "conv_pixels.cl"

    def __init__(self, rt, layer):
        self.rt = rt
        self.layer = layer
        self.variants = [Variant(name(block), partial(self.build, block), self) for block in BLOCKS]

    def candidates(self, shapes) -> list:
        """The variants, for inputs whose padded copy's offsets (the taps table's, 32-bit) fit in an int."""
        return [v.name for v in self.variants] if self.layer.taps_fit(shapes[0][-2:]) else []

    def preferred(self, shapes) -> str | None:
        """The variant the rule picks for these input shapes, or None: where the taps variants apply (the
        layer's gemm_dims gives their row) and K is MIN_K or more, unless Winograd has WINOGRAD_TILES or more;
        the block of fitting_block, none where every block has more slack."""
        layer = self.layer
        if not layer.gemm_dims(shapes)[3] or layer.w_gemm.shape[2] < MIN_K:
            return None
        if layer.winograd is not None:
            out = layer.output_shapes(shapes)[0]
            if math.prod(out[:-3]) * math.prod(F4.tiles(*out[-2:])) >= WINOGRAD_TILES:
                return None
        block = fitting_block(layer.out_channels)
        return name(block) if block else None

    def build(self, block: tuple) -> tuple:
        """The kernel for `block`, with the layer's epilogue, and the weights in its panels."""
        return (kernel(self.rt, block, self.layer.cl_epilogue.options),
                self.rt.upload(panels(self.layer.w_gemm[0], block)), block)

    def __call__(self, q, built: tuple, x, y, bias, epilogue: tuple) -> None:
        """Enqueue y = the convolution of x: device tensors (N, Cin, H, W) and (N, Cout, Ho, Wo), with one
        variant (build's)."""
        kernel_, weights, block = built
        layer, (ho, wo) = self.layer, y.shape[-2:]
        items = x.size // (layer.in_channels * math.prod(x.shape[-2:]))
        padded, taps, phase_w, plane = layer.padded_taps(q, x, items)
        enqueue(q, kernel_, block, y.buffer, padded, taps, weights, bias, epilogue, layer.out_channels,
                layer.w_gemm.shape[2], ho * wo, wo, phase_w, items, layer.in_channels * plane)
