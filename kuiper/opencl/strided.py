"""Copies between strided views on OpenCL: the one data-movement kernel (cl/copy.cl) behind permute,
transpose, cat, split, slice, select, stack, roll, flip, expand, repeat and the shuffles.

A copy is described the way numpy describes a view: a shape walked in row-major order and, for each side,
a start offset and a stride per dim, all in elements. A stride may be 0 (expand reads one element many
times) or negative (flip starts at the last element and walks back). Before anything is enqueued, size-1
dims are dropped and neighbouring dims that are contiguous on both sides are merged: a copy contiguous on
both sides (cat along dim 0, any split of a batch of 1) becomes one device-to-device byte copy, and the
kernel walks only the dims the layout really has. A copy left with more dims than the kernel walks (a
repeat of a 4-d tensor interleaves 8) is enqueued once per index of its outermost dims.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from kuiper.layers.walk import contiguous_strides
from kuiper.opencl.runtime import ROW_SPAN, round_up

#: the most dims cl/copy.cl walks (after merging)
MAX_RANK = 6
#: on CPUs, a copy whose destination rows (its innermost dim) are shorter than this walks along the source's
#: rows where those are longer: a work-item copies a row, and rows of a few elements cost little but the
#: finding of them (see StridedCopy.rows_first)
SHORT_ROW = 16
#: on CPUs, the work-groups of cl/copy.cl's rows: (1, ROW_GROUP) rows, and of a row a work-item's kernels
#: (reduce.py's RowGroups). Left to choose, Intel's runtime makes a work-group of each row and pays for every group
#: it starts
ROW_GROUP = 32
#: on CPUs, a copy contiguous along one dim on the source and another on the destination, both at least this
#: long, moves as tiles of TILE x TILE (cl/copy.cl's transpose_tiles; see StridedCopy.tiles)
TILE = 8
#: ... for elements of at most this many bytes (-DTILES): a tile's row of 8 is then a 256-bit vector. The PoCL
#: wheel, which targets AVX2, builds a program with 512-bit ones (8 int64) into one without its kernels
TILE_BYTES = 4
#: kernels that move bits (cl/copy.cl, cl/pad.cl) take an unsigned integer as wide as the element: one
#: program serves every dtype of that size
WORD_TYPES = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


@lru_cache(maxsize=256)
def merge_dims(shape: tuple, dst_strides: tuple, src_strides: tuple) -> tuple:
    """The same copy over the fewest dims: ((size, dst stride, src stride), ...), outermost first.

    A dim merges into the one before it when stepping the outer dim once equals walking the whole inner
    dim, on both sides. Cached: a graph meets the same few shapes on every forward."""
    merged = []
    for size, dst, src in zip(shape, dst_strides, src_strides):
        if size == 1:
            continue
        if merged and merged[-1][1] == dst * size and merged[-1][2] == src * size:
            merged[-1] = (merged[-1][0] * size, dst, src)
        else:
            merged.append((size, dst, src))
    return tuple(merged) or ((1, 1, 1),)  # a single element


class View(NamedTuple):
    """Elements of a DeviceTensor picked by a start offset and a stride per dim, in elements."""

    tensor: object
    strides: tuple
    offset: int = 0


def dense(tensor) -> View:
    """Every element of a contiguous tensor, in order."""
    return View(tensor, contiguous_strides(tensor.shape))


def sliced(tensor, index: tuple) -> View:
    """The view of a contiguous tensor that numpy's basic indexing `array[index]` gives: per dim an int (the
    dim is held there and dropped) or a slice, whose step may be negative; dims past the index stay whole."""
    offset, strides = 0, []
    for n, stride, part in zip(tensor.shape, contiguous_strides(tensor.shape), index):
        if isinstance(part, slice):
            start, _, step = part.indices(n)
            offset += start * stride
            strides.append(stride * step)
        else:
            offset += range(n)[part] * stride  # a negative index counts from the end, as in numpy
    return View(tensor, tuple(strides) + contiguous_strides(tensor.shape)[len(index):], offset)


class StridedCopy:
    """cl/copy.cl on one runtime. The program for float32 elements (what graphs carry, stored at the runtime's
    precision) is built with the layer; other element sizes are built when first met."""

    def __init__(self, rt):
        self.rt = rt
        self.rows = rt.is_cpu  # runs along the innermost dim's rows on CPUs, an element per work-item on GPUs
        self._kernels = {}
        self.kernel(rt.stored(np.float32).itemsize)

    def kernel(self, itemsize: int, name: str = "strided_copy"):
        kernel = self._kernels.get((itemsize, name))
        if kernel is None:
            rows = ["-DROWS", *(["-DTILES"] if itemsize <= TILE_BYTES else [])] if self.rows else []
            kernel = self.rt.kernel("copy.cl", name, [f"-DT={WORD_TYPES[itemsize]}", *rows])
            self._kernels[itemsize, name] = kernel
        return kernel

    def __call__(self, q, shape, dst: View, src: View) -> None:
        """For every coordinate c of `shape`: dst element (offset + c·strides) = src element (offset + c·strides).

        The kernel indexes with int: tensors up to 2^31 elements (np.int32 raises beyond)."""
        count = math.prod(shape)
        if count == 0:  # an empty piece: OpenCL refuses copies of 0 bytes, and there is nothing to do
            return
        dims = merge_dims(tuple(shape), tuple(dst.strides), tuple(src.strides))
        if self.rows:
            tiles = self.tiles(dims) if dst.tensor.dtype.itemsize <= TILE_BYTES else None
            if tiles is not None:
                self._transpose(q, *tiles, dst, src)
                return
            dims = self.rows_first(dims)
        if len(dims) == 1 and dims[0][1:] == (1, 1):
            itemsize = dst.tensor.dtype.itemsize
            q.copy(dst.tensor.buffer, src.tensor.buffer, count * itemsize,
                   dst.offset * itemsize, src.offset * itemsize)
            return
        self._walk(q, dims, dst, src)

    @staticmethod
    def rows_first(dims: tuple) -> tuple:
        """Merged dims walked with the source's rows innermost where the destination's are short (SHORT_ROW) and
        the source's longer: the same copy, element for element, in another order."""
        rows = dims[-1][0]
        if rows >= SHORT_ROW:
            return dims
        longer = [i for i, (size, _, src) in enumerate(dims) if src == 1 and size > rows]
        if not longer:
            return dims
        order = dims[:longer[0]] + dims[longer[0] + 1:] + dims[longer[0]:longer[0] + 1]
        return merge_dims(*(tuple(column) for column in zip(*order)))

    @staticmethod
    def tiles(dims: tuple) -> tuple | None:
        """(along, across, batch) where merged `dims` are a transpose: the destination's innermost dim (across)
        strided on the source, one other (along) contiguous on the source and strided on the destination, both
        at least TILE long, and at most one dim besides (batch, else a dim of one). None for any other copy."""
        across = dims[-1]
        along = [d for d in dims[:-1] if d[2] == 1 and d[1] != 1]
        if len(dims) > 3 or len(along) != 1 or across[1] != 1 or across[2] == 1 or min(across[0], along[0][0]) < TILE:
            return None
        batch = [d for d in dims[:-1] if d is not along[0]]
        return along[0], across, batch[0] if batch else (1, 0, 0)

    def _transpose(self, q, along, across, batch, dst: View, src: View) -> None:
        """Enqueue cl/copy.cl's transpose_tiles over the tiles of `along` x `across`, for each batch item."""
        kernel = self.kernel(dst.tensor.dtype.itemsize, "transpose_tiles")
        q.run(kernel, (-(-along[0] // TILE), -(-across[0] // TILE), batch[0]), None, dst.tensor.buffer,
              int(dst.offset), src.tensor.buffer, int(src.offset), along[0], across[0], across[2], along[1], batch[2],
              batch[1])

    def _walk(self, q, dims, dst: View, src: View) -> None:
        """Enqueue cl/copy.cl over merged `dims`; past the kernel's rank, once per index of the outermost dim."""
        if len(dims) > MAX_RANK:
            (size, dst_stride, src_stride), inner = dims[0], dims[1:]
            for i in range(size):
                self._walk(q, inner, dst._replace(offset=dst.offset + i * dst_stride),
                           src._replace(offset=src.offset + i * src_stride))
            return
        # the slots cl/copy.cl expects: the outermost dim first, the inner ones last, unused ones between
        slots = dims[:1] + ((1, 0, 0),) * (MAX_RANK - len(dims)) + dims[1:]
        sizes, dst_strides, src_strides = zip(*slots)
        count = math.prod(sizes)
        kernel = self.kernel(dst.tensor.dtype.itemsize)
        args = (dst.tensor.buffer, int(dst.offset), src.tensor.buffer, int(src.offset), count, len(dims), *sizes[1:],
                *dst_strides, *src_strides)
        if not self.rows:
            q.run(kernel, (round_up(count, 256),), None, *args, 1)
            return
        # (cl/copy.cl) the rows in whole work-groups of ROW_GROUP, then the rest at an offset: the kernel has no
        # bounds check, which would keep PoCL from running work-items as vector lanes
        inner = sizes[-1] if len(dims) > 1 else count
        span = min(inner, ROW_SPAN)
        runs, rows = -(-inner // span), count // inner
        whole = rows - rows % ROW_GROUP
        if whole:
            q.run(kernel, (runs, whole), (1, ROW_GROUP), *args, span)
        if whole < rows:
            q.run(kernel, (runs, rows - whole), None, *args, span, offset=(0, whole))

    def permute(self, q, dst, src, axes) -> None:
        """dst = src with its dims reordered, both contiguous: dim i of dst is dim axes[i] of src.

        The walk follows dst, so consecutive work-items write consecutive elements and the reads stride."""
        strides = contiguous_strides(src.shape)
        self(q, dst.shape, dense(dst), View(src, tuple(strides[a] for a in axes)))

    def blocks(self, q, whole, pieces, axis: int, into_whole: bool) -> None:
        """Cat (into_whole: the pieces are copied into whole) or split (out of whole) along `axis`.

        Seen as rows, one per index of the dims before axis, every piece is a block of each row of the
        whole, the pieces side by side in order: a 2-D copy per piece, contiguous along the row."""
        count, length = math.prod(whole.shape[:axis]), math.prod(whole.shape[axis:])
        start = 0
        for piece in pieces:
            block = math.prod(piece.shape[axis:])
            wide, narrow = View(whole, (length, 1), start), View(piece, (block, 1))
            self(q, (count, block), *((wide, narrow) if into_whole else (narrow, wide)))
            start += block
