"""The block allocator of a language model's paged KV cache: one pool of blocks, a free list, a table a sequence.

Every CachedAttention layer holds a pool of the same number of blocks (kuiper/layers/pages.py: BLOCK_SIZE
positions each), and one allocator shares them out for all the layers at once: block 7 of a sequence is block 7
of every layer's pool. A sequence takes blocks as it grows, a block whenever its length crosses a multiple of
BLOCK_SIZE, and gives them all back when it ends, so that the memory held follows the tokens held, whatever
length a sequence might have reached. The free list hands out the lowest-numbered free block first: a sequence
alone in the pool gets blocks 0, 1, 2, ..., the contiguous cache of lesson 23.

A step packs the new tokens of several sequences into one row (`pack`): the token ids one after the other, each
with its position, and the PageLayout telling the attention layers which tokens are whose.
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


def pack(entries) -> tuple:
    """(ids (1, T) int64, positions (T,) int64, PageLayout) for [(sequence, new token ids), ...]: each sequence's
    ids continue it at its length, in the order given, its blocks reserved. The lengths stay as they are: the
    caller advances them once the forward has run."""
    spans, ids, positions, first = [], [], [], 0
    for sequence, new in entries:
        count = len(new)
        sequence.reserve(sequence.length + count)
        spans.append(Span(0, first, count, sequence.length, tuple(sequence.table)))
        ids.extend(new)
        positions.append(np.arange(sequence.length, sequence.length + count, dtype=np.int64))
        first += count
    tokens = np.asarray(ids, dtype=np.int64).reshape(1, -1)
    return tokens, np.concatenate(positions), PageLayout(spans, 1, first)
