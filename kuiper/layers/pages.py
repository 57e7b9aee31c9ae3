"""Where a forward's tokens keep their keys and values: the paged layout CachedAttention reads its cache through.

A CachedAttention layer keeps its keys and values in a pool of fixed-size blocks of BLOCK_SIZE positions, two
arrays (num_kv_heads, blocks x BLOCK_SIZE, head_dim): slot `s` of a head is position `s % BLOCK_SIZE` of block
`s // BLOCK_SIZE`. A sequence owns some of the blocks, listed in order in its block table, so that its position
`p` lives at slot

    table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE

and it holds memory for the positions it has, a block at a time, wherever the free blocks are. A sequence whose
table is 0, 1, 2, ... is the contiguous cache of one sequence: slot = position.

A forward runs spans, each a run of consecutive positions of one sequence: `count` tokens of batch row `row`
from token `first`, at positions `start .. start + count - 1`, with the sequence's table. A language model packs
the tokens of many sequences into one row, a span each (kuiper/llm/paged.py); a layer used alone makes one
span per batch row itself. Each token sees the positions 0 .. its own of its own sequence, nothing else.

PageLayout works out once per forward what every attention layer of the model needs: each token's slot (where
its key and value go), and for each span the slots of positions 0 .. end - 1 (where its queries read), a slice
when the table's blocks are consecutive, else the slots themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiper.core.errors import InputError

#: positions per block: small enough that a sequence wastes less than a block, large enough that a block's keys
#: are a run of memory worth reading at once
BLOCK_SIZE = 16


def blocks_for(positions: int) -> int:
    """The blocks that hold `positions` positions."""
    return -(-positions // BLOCK_SIZE)


@dataclass(frozen=True)
class Span:
    """`count` tokens of batch row `row`, from token `first`, at positions start .. start + count - 1 of the
    sequence whose block table is `table`."""

    row: int
    first: int
    count: int
    start: int
    table: tuple

    @property
    def end(self) -> int:
        return self.start + self.count


class PageLayout:
    """The spans of one forward over q of shape (rows, heads, tokens, head_dim), checked to cover every token
    once, each within its table; `device` keeps what a backend derives from it (the OpenCL layer's uploaded
    indices, by runtime; the numpy layer's grouping of one-token spans)."""

    def __init__(self, spans, rows: int, tokens: int):
        self.spans, self.rows, self.tokens = tuple(spans), rows, tokens
        row, first, count, start, blocks = np.array([(s.row, s.first, s.count, s.start, len(s.table))
                                                     for s in self.spans], np.int64).reshape(-1, 5).T
        self._check_spans(row, first, count, start, blocks)
        # every span's tokens at once (a server packs dozens of spans a step): each token's span, its place in
        # the forward (row-major) and its position; then its slot through its span's table
        span_of = np.repeat(np.arange(len(self.spans)), count)
        within = np.arange(span_of.size) - np.repeat(np.cumsum(count) - count, count)
        index = (row * tokens + first)[span_of] + within
        claims = np.bincount(index, minlength=rows * tokens)
        if np.any(claims > 1):
            self._raise_overlap(rows, tokens)
        if np.any(claims == 0):
            raise InputError(f"the spans leave tokens of the forward's {rows} x {tokens} without a sequence")
        self.positions = np.empty((rows, tokens), np.int64)
        self.positions.ravel()[index] = position = start[span_of] + within
        table_first = np.cumsum(blocks) - blocks  # where each span's table starts in `tables`
        tables = np.concatenate([np.asarray(s.table, np.int64) for s in self.spans] or [np.zeros(0, np.int64)])
        self.slots = np.empty(rows * tokens, np.int64)      # token (row-major) -> its slot
        self.slots[index] = tables[table_first[span_of] + position // BLOCK_SIZE] * BLOCK_SIZE + position % BLOCK_SIZE
        self.table_at = np.empty(rows * tokens, np.int32)   # token -> where its table starts in `tables`
        self.table_at[index] = table_first[span_of]
        self.tables = tables.astype(np.int32) if tables.size else np.zeros(1, np.int32)
        self._reads = None
        self.device = {}

    def _check_spans(self, row, first, count, start, blocks) -> None:
        """Each span within the forward's rows x tokens, and its positions within its table."""
        outside = ~((0 <= row) & (row < self.rows) & (first >= 0) & (count >= 1) & (first + count <= self.tokens)
                    & (start >= 0))
        short = blocks * BLOCK_SIZE < start + count
        wrong = np.flatnonzero(outside | short)
        if wrong.size:
            span = self.spans[wrong[0]]
            if outside[wrong[0]]:
                raise InputError(f"span {span.row, span.first, span.count} is outside the forward's {self.rows} x "
                                 f"{self.tokens} tokens")
            raise InputError(f"a block table of {len(span.table)} blocks holds {len(span.table) * BLOCK_SIZE} "
                             f"positions, not {span.end}")

    def _raise_overlap(self, rows: int, tokens: int) -> None:
        """The first span claiming a token an earlier one claimed."""
        taken = np.zeros((rows, tokens), bool)
        for span in self.spans:
            claimed = taken[span.row, span.first:span.first + span.count]
            if claimed.any():
                raise InputError(f"two spans claim token {span.first} of row {span.row}")
            claimed[:] = True

    @property
    def reads(self) -> list:
        """For each span, the slots of its positions 0 .. end - 1, where its queries read: a slice when the
        table's blocks are consecutive, else the slots themselves (worked out at the first call)."""
        if self._reads is None:
            self._reads = []
            for span in self.spans:
                table = np.asarray(span.table, np.int64)
                slots = (table[:, None] * BLOCK_SIZE + np.arange(BLOCK_SIZE)).ravel()[:span.end]
                consecutive = bool(np.all(np.diff(table[:blocks_for(span.end)]) == 1))
                self._reads.append(slice(slots[0], slots[0] + span.end) if consecutive else slots)
        return self._reads

    def check(self, op, rows: int, tokens: int, positions: np.ndarray) -> None:
        """The forward's shapes and positions are the ones this layout was made for (op names the layer)."""
        if (rows, tokens) != (self.rows, self.tokens) or np.any(self.positions != positions.reshape(1, -1)):
            raise InputError(f"{op.type} operator '{op.name}': the page layout is for {self.rows} x {self.tokens} "
                             f"tokens at positions {self.positions[0, :8].tolist()}, the forward has {rows} x "
                             f"{tokens} at {positions[:8].tolist()}")
