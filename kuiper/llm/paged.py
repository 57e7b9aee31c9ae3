"""The block allocator of a language model's paged KV cache: one pool of blocks, a free list, a table a sequence.

Every CachedAttention layer holds a pool of the same number of blocks (kuiper/layers/pages.py: BLOCK_SIZE
positions each), and one allocator shares them out for all the layers at once: block 7 of a sequence is block 7
of every layer's pool. A sequence takes blocks as it grows, a block whenever its length crosses a multiple of
BLOCK_SIZE, and gives them all back when it ends, so that the memory held follows the tokens held, whatever
length a sequence might have reached. The free list hands out the lowest-numbered free block first: a sequence
alone in the pool gets blocks 0, 1, 2, ..., the contiguous cache of lesson 23.

A step packs the new tokens of several sequences into one row (`pack`): the token ids one after the other, each
with its position, and the PageLayout telling the attention layers which tokens are whose.

On a backend that replays a recorded forward (kuiper/opencl/replay.py) a packed length met before costs half a
length met for the first time, and a server meets many lengths; there a step is padded up to one of a few
lengths (`bucket`), so that its forwards come back to the same plans. The padding rows are a sequence of their
own in a block no sequence holds (`scratch`): they write and read that block alone, and their logits are dropped.
"""

from __future__ import annotations

import heapq

import numpy as np

from kuiper.core.errors import MemoryLimitError
from kuiper.layers.pages import BLOCK_SIZE, PageLayout, Span, blocks_for


class BlockPool:
    """`blocks` blocks, numbered 0 .. blocks - 1, each free or held by one sequence."""

    def __init__(self, blocks: int):
        self.blocks = blocks
        self.free = list(range(blocks))  # a heap: the lowest free block first

    @property
    def available(self) -> int:
        return len(self.free)

    @property
    def held(self) -> int:
        return self.blocks - len(self.free)

    def take(self) -> int:
        if not self.free:
            raise MemoryLimitError(f"the KV cache's {self.blocks} blocks of {BLOCK_SIZE} positions are all held")
        return heapq.heappop(self.free)

    def give(self, blocks) -> None:
        for block in blocks:
            heapq.heappush(self.free, block)


class Sequence:
    """One sequence's block table and length (the positions its keys and values fill) in a BlockPool."""

    def __init__(self, pool: BlockPool):
        self.pool = pool
        self.table = []
        self.length = 0

    def reserve(self, positions: int) -> None:
        """Hold blocks for positions 0 .. positions - 1, taking what is missing from the pool."""
        while len(self.table) < blocks_for(positions):
            self.table.append(self.pool.take())

    def release(self) -> None:
        """Give every block back: the sequence is empty."""
        self.pool.give(self.table)
        self.table, self.length = [], 0


#: the token id padding rows carry (any id of the vocabulary would do: their logits are dropped)
PAD_ID = 0
#: the longest packed length padded (bucket)
LARGEST_BUCKET = 512


def bucket(tokens: int) -> int:
    """The packed length a step of `tokens` tokens is padded to: itself up to 4, then the next of 2^k and
    3 x 2^(k-1) (6, 8, 12, 16, 24, 32, 48, ...): two lengths an octave, for less than half as many rows again
    (a sixth on average); itself past LARGEST_BUCKET, where a forward takes long enough that its padding would
    cost more than a walk saves."""
    if tokens <= 4 or tokens > LARGEST_BUCKET:
        return tokens
    power = 1 << (tokens - 1).bit_length()  # the power of two at or above
    return 3 * power // 4 if tokens <= 3 * power // 4 else power


#: every length bucket() pads to
BUCKETS = tuple(sorted({bucket(tokens) for tokens in range(1, LARGEST_BUCKET + 1)}))


def pack(entries, padded: int = 0, scratch: int | None = None) -> tuple:
    """(ids (1, T) int64, positions (T,) int64, PageLayout) for [(sequence, new token ids), ...]: each sequence's
    ids continue it at its length, in the order given, its blocks reserved. The lengths stay as they are: the
    caller advances them once the forward has run. padded > the tokens given: PAD_ID rows after them up to
    `padded` tokens, in spans of BLOCK_SIZE at most, each at positions 0, 1, ... of block `scratch`: they write
    and read that block alone (the spans the same slots, whatever ends there)."""
    spans, ids, positions, first = [], [], [], 0
    for sequence, new in entries:
        count = len(new)
        sequence.reserve(sequence.length + count)
        spans.append(Span(0, first, count, sequence.length, tuple(sequence.table)))
        ids.extend(new)
        positions.append(np.arange(sequence.length, sequence.length + count, dtype=np.int64))
        first += count
    while first < padded:
        count = min(BLOCK_SIZE, padded - first)
        spans.append(Span(0, first, count, 0, (scratch,)))
        ids.extend([PAD_ID] * count)
        positions.append(np.arange(count, dtype=np.int64))
        first += count
    tokens = np.asarray(ids, dtype=np.int64).reshape(1, -1)
    return tokens, np.concatenate(positions), PageLayout(spans, 1, first)
