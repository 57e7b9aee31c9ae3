"""The numpy backend's cached attention: each K/V head's whole group of query heads as one matrix, so that a
prompt's products are GEMMs (BLAS), bands of query rows shared by kuiper's threads (kuiper/cpu/threads.py).

The reference views a span's q as (kv_heads, group, n, D) and multiplies it by the keys broadcast over the group
(a stride-0 axis). numpy runs a broadcast stack of products in its own loops rather than BLAS, which at a
511-token prompt with 9 heads over 3 K/V heads made the two products most of a forward. Here q is seen as
(kv_heads, group x n, D), a view when the span is the whole row since the group's heads are neighbours, and the
span's keys as (kv_heads, positions, D): scores = q @ keys^T and out = softmax(scores) @ values are stacks of
GEMMs. The causal mask touches only the last n columns (the keys this forward wrote), added as a (group x n, n)
block of -inf above each token's own position.

A decode step has only `group` query rows per K/V head, too few for BLAS to repay packing the keys for each
product: there the reference's broadcast products, numpy's own loop of one vector-matrix product per row, are as
fast as numpy gets, and a span of fewer than FEW_ROWS rows per K/V head is the reference's.

A packed step of a server decodes many sequences at once, a one-token span each (kuiper/llm/scheduler.py). One
`attend` per span would cost a few dozen numpy calls per sequence and layer, more than their arithmetic; so the
one-token spans of a forward attend together (`DecodeSteps`): each reads the blocks of its keys and values,
padded to the most blocks any has, the padding masked with -inf, and the whole set is two stacks of products.

The paged cache, its layouts and checks are the reference's: `attend`, one span's attention, and the grouping of
one-token spans differ.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.attention import softmax_rows
from kuiper.cpu.registry import fast
from kuiper.layers import cached_attention
from kuiper.layers.pages import BLOCK_SIZE, blocks_for


#: below this many query rows per K/V head (a decode step has `group`) the reference's forward is the faster
FEW_ROWS = 12
#: from this many one-token spans in a forward on, they attend together (one alone reads its keys in place)
MIN_TOGETHER = 2


class DecodeSteps:
    """The one-token spans of a PageLayout, to attend together: their batch rows and tokens, each one's blocks
    padded to the most any of them has (with its first block), and an additive mask, -inf past each one's
    position; `apart`, the other spans. Worked out once per layout, for every layer of the forward."""

    def __init__(self, layout):
        one = [i for i, span in enumerate(layout.spans) if span.count == 1]
        if len(one) < MIN_TOGETHER:
            one = []
        self.apart = sorted(set(range(len(layout.spans))) - set(one))
        spans = [layout.spans[i] for i in one]
        self.rows = np.array([span.row for span in spans], np.int64)
        self.tokens = np.array([span.first for span in spans], np.int64)
        width = max((blocks_for(span.end) for span in spans), default=0)
        self.blocks = np.empty((len(one), width), np.int64)
        self.mask = np.zeros((len(one), width * BLOCK_SIZE), np.float32)
        for k, span in enumerate(spans):
            used = span.table[:blocks_for(span.end)]
            self.blocks[k, :len(used)] = used
            self.blocks[k, len(used):] = used[0]
            self.mask[k, span.end:] = -np.inf
        self.ones = np.ones((width * BLOCK_SIZE, 1), np.float32)

    @classmethod
    def of(cls, layout) -> "DecodeSteps":
        found = layout.device.get(cls)
        if found is None:
            found = layout.device[cls] = cls(layout)
        return found


@fast("kuiper.CachedAttention")
class CachedAttention(cached_attention.CachedAttention):
    def __init__(self, op):
        super().__init__(op)
        self.masks = {}  # tokens -> the causal block for the newest keys, (group x tokens, tokens)

    def causal_block(self, tokens: int) -> np.ndarray:
        """-inf where query row r (token r % tokens of its head) would see a key written after its own: the
        additive mask of the last `tokens` columns, the same for every head of the group."""
        block = self.masks.get(tokens)
        if block is None:
            later = np.triu(np.full((tokens, tokens), -np.inf, np.float32), 1)
            block = self.masks[tokens] = np.tile(later, (self.group, 1))
        return block

    def attend(self, q, keys, values, start, out):
        tokens, dim = q.shape[1:]
        if self.group * tokens < FEW_ROWS:
            super().attend(q, keys, values, start, out)
            return
        end = start + tokens
        stack, rows = self.num_kv_heads, self.group * tokens
        queries = q.reshape(stack, rows, dim)  # a view when q is a whole row's, else a copy
        keys_t = keys.transpose(0, 2, 1)
        target = out.reshape(stack, rows, dim)
        direct = np.may_share_memory(target, out)  # a view of the output (as for a whole row): written in place
        if not direct:
            target = np.empty((stack, rows, dim), np.float32)
        mask = self.causal_block(tokens)
        scale, ones = np.float32(1 / math.sqrt(dim)), np.ones((end, 1), np.float32)

        def attend(items: slice, first: int, stop: int) -> None:
            """Query rows first .. stop - 1 of the K/V heads `items`."""
            scores = np.matmul(queries[items, first:stop], keys_t[items])
            scores *= scale
            scores[..., start:] += mask[first:stop]
            softmax_rows(scores, np.empty(scores.shape[:-1] + (1,), np.float32), False, ones)
            np.matmul(scores, values[items], out=target[items, first:stop])

        def part(first, stop, _):
            # the flat rows first .. stop - 1 of the stack: a partial head, whole heads at once, a partial head
            head, tail = divmod(first, rows)
            if tail:
                attend(slice(head, head + 1), tail, min(rows, tail + stop - first))
                head += 1
            whole = (stop - head * rows) // rows
            if whole > 0:
                attend(slice(head, head + whole), 0, rows)
                head += whole
            if head * rows < stop and head < stack:
                attend(slice(head, head + 1), 0, stop - head * rows)

        threads.parallel(part, stack * rows, grain=-(-threads.MIN_MACS // (2 * end * dim)))
        if not direct:
            out[...] = target.reshape(out.shape)

    def attend_spans(self, q, layout, out):
        steps = DecodeSteps.of(layout)
        for index in steps.apart:
            self.attend_span(q, layout, index, out)
        if len(steps.rows):
            self.attend_together(q, steps, out)

    def attend_together(self, q, steps: DecodeSteps, out) -> None:
        """The one-token spans: queries (kv_heads, spans, group, D) against their padded keys (kv_heads, spans,
        longest, D), one stack of products for the scores and one for the output."""
        count, dim = len(steps.rows), self.head_dim

        def padded(pool_array):
            """The spans' blocks of a pool array, (kv_heads, spans, blocks x BLOCK_SIZE, D): np.take copies whole
            blocks several times faster than indexing copies slots."""
            blocks = pool_array.reshape(self.num_kv_heads, -1, BLOCK_SIZE, dim)
            return np.take(blocks, steps.blocks, axis=1).reshape(self.num_kv_heads, count, -1, dim)

        cache_k, cache_v = self.pool
        queries = q[steps.rows, :, steps.tokens].reshape(count, self.num_kv_heads, self.group, dim)
        scores = np.matmul(queries.transpose(1, 0, 2, 3), padded(cache_k).swapaxes(-1, -2))
        scores *= np.float32(1 / math.sqrt(dim))
        scores += steps.mask[:, None]
        softmax_rows(scores, np.empty(scores.shape[:-1] + (1,), np.float32), False, steps.ones)
        attended = np.matmul(scores, padded(cache_v))  # (kv_heads, spans, group, D)
        out[steps.rows, :, steps.tokens] = attended.transpose(1, 0, 2, 3).reshape(count, self.num_heads, dim)
