"""The numpy backend's cached attention: each K/V head's whole group of query heads as one matrix, so that a
prompt's products are GEMMs (BLAS), bands of query rows shared by kuiper's threads (kuiper/cpu/threads.py).

The reference views q as (B, kv_heads, group, S, D) and multiplies it by the keys broadcast over the group (a
stride-0 axis). numpy runs a broadcast stack of products in its own loops rather than BLAS, which at a 511-token
prompt with 9 heads over 3 K/V heads made the two products most of a forward. Here q is seen as (B x kv_heads,
group x S, D), a view since the group's heads are neighbours, and the cache as (B x kv_heads, max_positions, D):
scores = q @ keys^T and out = softmax(scores) @ values are stacks of GEMMs on views, written straight into the
output. The causal mask touches only the last S columns (the keys this forward wrote), added as a (group x S, S)
block of -inf above each token's own position.

A decode step has only `group` query rows per K/V head, too few for BLAS to repay packing the keys for each
product: there the reference's broadcast products, numpy's own loop of one vector-matrix product per row, are as
fast as numpy gets, and a forward of fewer than FEW_ROWS rows per K/V head is the reference's.

The cache, its checks and `filled` are the reference's.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.errors import InputError
from kuiper.cpu import threads
from kuiper.cpu.attention import softmax_rows
from kuiper.cpu.registry import fast
from kuiper.layers import cached_attention


#: below this many query rows per K/V head (a decode step has `group`) the reference's forward is the faster
FEW_ROWS = 12


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

    def forward_numpy(self, inputs, outputs):
        q, k, v, positions = inputs
        batch, _, tokens, dim = q.shape
        if self.group * tokens < FEW_ROWS:
            super().forward_numpy(inputs, outputs)
            return
        start = self.check_positions(positions)
        if self.cache_k is None or self.cache_k.shape[0] != batch:
            if start:
                raise InputError(f"{self.op.type} operator '{self.op.name}': a new batch size ({batch}) starts a "
                                 f"new cache, at position 0, not {start}")
            shape = (batch, self.num_kv_heads, self.max_positions, dim)
            self.cache_k, self.cache_v = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        end = start + tokens
        self.cache_k[:, :, start:end] = k
        self.cache_v[:, :, start:end] = v
        self.filled = end

        stack, rows = batch * self.num_kv_heads, self.group * tokens
        queries = q.reshape(stack, rows, dim)
        keys_t = self.cache_k.reshape(stack, self.max_positions, dim)[:, :end].transpose(0, 2, 1)
        values = self.cache_v.reshape(stack, self.max_positions, dim)[:, :end]
        contiguous = outputs[0].flags.c_contiguous  # as the graph's are; else computed aside and copied
        out = outputs[0].reshape(stack, rows, dim) if contiguous else np.empty((stack, rows, dim), np.float32)
        mask = self.causal_block(tokens)
        scale, ones = np.float32(1 / math.sqrt(dim)), np.ones((end, 1), np.float32)

        def attend(items: slice, first: int, stop: int) -> None:
            """Query rows first .. stop - 1 of the K/V heads `items`."""
            scores = np.matmul(queries[items, first:stop], keys_t[items])
            scores *= scale
            scores[..., start:] += mask[first:stop]
            softmax_rows(scores, np.empty(scores.shape[:-1] + (1,), np.float32), False, ones)
            np.matmul(scores, values[items], out=out[items, first:stop])

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
        if not contiguous:
            outputs[0][...] = out.reshape(outputs[0].shape)
