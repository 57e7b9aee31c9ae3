"""Causal grouped-query attention over a paged KV cache: how a decoder attends while it generates.

A decoder produces text one token at a time, and token p may look at tokens 0..p only (causal). Recomputing
every earlier token's key and value at each step would make generating n tokens cost n^2 projections; instead
each step's keys and values are written into a cache, and a new token's query reads them all from there. The
first step (prefill) runs the whole prompt at once, positions 0..n-1; then each step runs one token:

    cache_k[positions] = k;  cache_v[positions] = v
    out[h, s] = softmax(q[h, s] . cache_k[g, 0..p] / sqrt(head_dim)) @ cache_v[g, 0..p]
                p = positions[s],   g = h // (num_heads / num_kv_heads)

Grouped-query attention (GQA): fewer key/value heads than query heads, each K/V head serving
num_heads / num_kv_heads consecutive query heads. The cache, which grows with the context, shrinks by the same
factor (Llama 3 8B: 32 query heads, 8 KV heads, a quarter of the cache). num_kv_heads = num_heads is ordinary
multi-head attention, num_kv_heads = 1 multi-query attention.

Inputs: q (B, num_heads, S, head_dim), k and v (B, num_kv_heads, S, head_dim), already rotated (rotary.py), and
positions (S,) int64. Output: (B, num_heads, S, head_dim), as F.scaled_dot_product_attention gives; or, where the
heads pass (kuiper/runtime/heads.py) took in the permute and reshape that join the heads again after it
(`heads_last`), (B, S, num_heads * head_dim), each token's heads side by side, written so directly.

The cache is a pool of blocks (pages.py), state the layer keeps between forwards, allocated at the first forward
and counted as the layer's workspace, which it keeps, so that the graph's memory limit covers it before anything
is allocated. Which blocks a token's keys go to and read from is a PageLayout:

* given by a language model with `use(layout)` before a forward: its tokens packed into one row (B = 1), a span
  of consecutive positions per sequence, each sequence's blocks from the pool of `use_pool(blocks)` blocks;
* else made by the layer: each batch row one sequence, owning max_positions positions of blocks in order, so
  that its cache is the contiguous `cache_k[b]`. `filled` is how many positions they hold: a forward may start
  at any position up to `filled` (0 starts a new sequence, `filled` continues it, anything between rewinds)
  and must run consecutive positions; `reset()` empties it.

Keys and values past the positions a query may see are never read, so nothing needs clearing between sequences.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.errors import InputError
from kuiper.layers.base import Layer
from kuiper.layers.pages import BLOCK_SIZE, PageLayout, Span, blocks_for
from kuiper.layers.registry import register


@register("kuiper.CachedAttention")
class CachedAttention(Layer):
    num_inputs = 4
    keeps_workspace = True  # the cache lives as long as the layer

    def __init__(self, op):
        super().__init__(op)
        self.num_heads = self.int_param("num_heads")
        self.num_kv_heads = self.int_param("num_kv_heads")
        self.head_dim = self.int_param("head_dim")
        self.max_positions = self.int_param("max_positions")
        if min(self.num_heads, self.num_kv_heads, self.head_dim, self.max_positions) < 1:
            raise self.error(f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim} "
                             f"and max_positions={self.max_positions} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise self.error(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        self.group = self.num_heads // self.num_kv_heads  # query heads per K/V head
        self.pool = None         # (keys, values), each (num_kv_heads, blocks x BLOCK_SIZE, head_dim), at first use
        self.pool_rows = 0       # the batch rows the layer's own pool was made for (0: a model's pool)
        self.pool_blocks = None  # a model's pool size (use_pool)
        self.layout = None       # a model's PageLayout for the next forwards (use)
        self.filled = 0
        self.heads_last = False  # the output (B, S, num_heads * head_dim): set by the heads pass

    def reset(self) -> None:
        """Start a new sequence: the cache holds no position (its memory stays allocated)."""
        self.filled = 0

    def use_pool(self, blocks: int) -> None:
        """Hold a pool of `blocks` blocks, which a model's layouts share out among its sequences (allocated at the
        next forward)."""
        self.pool_blocks, self.pool, self.pool_rows = blocks, None, 0

    def use(self, layout: PageLayout | None) -> None:
        """The page layout of the next forwards (None: one sequence per batch row, the layer's own)."""
        self.layout = layout

    def blocks(self, batch: int) -> int:
        return self.pool_blocks if self.pool_blocks is not None else batch * blocks_for(self.max_positions)

    def cache_bytes(self, batch: int = 1) -> int:
        """Bytes of the keys and values in the pool: a model's, else `batch` sequences of max_positions tokens."""
        return 2 * self.num_kv_heads * self.blocks(batch) * BLOCK_SIZE * self.head_dim * 4

    def output_shapes(self, input_shapes):
        q, k, v, positions = (tuple(s) for s in input_shapes)
        if len(q) != 4 or q[1] != self.num_heads or q[3] != self.head_dim:
            raise self.shape_error(f"expects q (B, {self.num_heads}, S, {self.head_dim}), got {q}")
        kv = (q[0], self.num_kv_heads, q[2], self.head_dim)
        if k != kv or v != kv:
            raise self.shape_error(f"expects k and v {kv} for q {q}, got {k} and {v}")
        if positions != (q[2],):
            raise self.shape_error(f"expects positions ({q[2]},), one per token of q {q}, got {positions}")
        return [(q[0], q[2], q[1] * q[3])] if self.heads_last else [q]

    def output_dtypes(self, input_dtypes):
        if np.dtype(input_dtypes[3]).kind not in "iu":
            raise self.shape_error(f"expects integer positions, got {np.dtype(input_dtypes[3])}")
        return [np.dtype(np.float32)]

    def workspace_bytes(self, input_shapes):
        # the cache alone: the scores, (heads, S, positions so far), are a temporary of forward, as other layers' are
        return self.cache_bytes(input_shapes[0][0])

    def macs(self, input_shapes, output_shapes):
        # a prefill of S tokens from an empty cache: S keys for each query (q.k, then the weights times v); a
        # decode step at position p reads p + 1 keys, which the shapes alone do not tell
        batch, _, tokens, _ = input_shapes[0]
        return 2 * batch * self.num_heads * tokens * tokens * self.head_dim

    # ---- which slots each token writes and reads -------------------------------------------------------
    def check_positions(self, positions: np.ndarray) -> int:
        """The first position, after checking that the positions continue (or restart) what the cache holds."""
        start = int(positions[0])
        if not 0 <= start <= self.filled or np.any(positions != np.arange(start, start + len(positions))):
            raise InputError(f"{self.op.type} operator '{self.op.name}': positions must be consecutive and start "
                             f"at most at {self.filled} (the positions the cache holds), got {positions[:8].tolist()}"
                             f"{'...' if len(positions) > 8 else ''}")
        if start + len(positions) > self.max_positions:
            raise InputError(f"{self.op.type} operator '{self.op.name}': position {start + len(positions) - 1} is "
                             f"past the cache's max_positions={self.max_positions}")
        return start

    def check_reach(self, layout: PageLayout) -> None:
        """A model's layout stays within the cache's max_positions."""
        last = int(layout.positions.max())
        if last >= self.max_positions:
            raise InputError(f"{self.op.type} operator '{self.op.name}': position {last} is past the cache's "
                             f"max_positions={self.max_positions}")

    def step(self, batch: int, tokens: int, positions: np.ndarray) -> tuple:
        """(the forward's PageLayout, whether the pool must be made now): a model's layout, checked against the
        positions, or one sequence per batch row continuing `filled`."""
        if self.layout is not None:
            self.layout.check(self.op, batch, tokens, positions)
            self.check_reach(self.layout)
            return self.layout, self.pool is None
        start = self.check_positions(positions)
        fresh = self.pool is None or self.pool_rows != batch
        if fresh and start:
            raise InputError(f"{self.op.type} operator '{self.op.name}': a new batch size ({batch}) starts a new "
                             f"cache, at position 0, not {start}")
        own = blocks_for(self.max_positions)
        self.filled = start + tokens
        return PageLayout([Span(row, 0, tokens, start, tuple(range(row * own, (row + 1) * own)))
                           for row in range(batch)], batch, tokens), fresh

    def as_rows(self, pool_array: np.ndarray) -> np.ndarray:
        """A pool array (num_kv_heads, slots, head_dim) seen as the caches of its batch rows, (rows, num_kv_heads,
        slots per row, head_dim): a view; one row for a model's pool."""
        rows = max(self.pool_rows, 1)
        return pool_array.reshape(self.num_kv_heads, rows, -1, self.head_dim).transpose(1, 0, 2, 3)

    @property
    def cache_k(self):
        return None if self.pool is None else self.as_rows(self.pool[0])

    @property
    def cache_v(self):
        return None if self.pool is None else self.as_rows(self.pool[1])

    # ---- forward ---------------------------------------------------------------------------------------
    def forward_numpy(self, inputs, outputs):
        q, k, v, positions = inputs
        batch, _, tokens, dim = q.shape
        layout, fresh = self.step(batch, tokens, positions)
        if fresh:
            shape = (self.num_kv_heads, self.blocks(batch) * BLOCK_SIZE, dim)
            self.pool, self.pool_rows = (np.zeros(shape, np.float32), np.zeros(shape, np.float32)), \
                (0 if self.layout is not None else batch)
        cache_k, cache_v = self.pool
        # (B, kv_heads, S, D) -> (kv_heads, B x S, D), the tokens in the layout's order
        cache_k[:, layout.slots] = k.transpose(1, 0, 2, 3).reshape(self.num_kv_heads, batch * tokens, dim)
        cache_v[:, layout.slots] = v.transpose(1, 0, 2, 3).reshape(self.num_kv_heads, batch * tokens, dim)
        self.attend_spans(q, layout, self.heads_view(outputs[0], q.shape))

    def heads_view(self, out: np.ndarray, shape: tuple) -> np.ndarray:
        """The output as (B, num_heads, S, head_dim), q's `shape`: itself, or a view of its heads_last layout."""
        batch, heads, tokens, dim = shape
        return out.reshape(batch, tokens, heads, dim).transpose(0, 2, 1, 3) if self.heads_last else out

    def attend_spans(self, q: np.ndarray, layout: PageLayout, out: np.ndarray) -> None:
        """Every span of the layout, one after the other (the numpy backend runs one-token spans together)."""
        for index in range(len(layout.spans)):
            self.attend_span(q, layout, index, out)

    def attend_span(self, q: np.ndarray, layout: PageLayout, index: int, out: np.ndarray) -> None:
        """Span `index` of the layout: its queries over its sequence's keys and values, read from the pool."""
        cache_k, cache_v = self.pool
        span, read = layout.spans[index], layout.reads[index]
        at = slice(span.first, span.first + span.count)
        self.attend(q[span.row, :, at], cache_k[:, read], cache_v[:, read], span.start, out[span.row, :, at])

    def attend(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, out: np.ndarray) -> None:
        """One span: q (num_heads, n, D) at positions start .. start + n - 1 over its sequence's keys and values
        (num_kv_heads, start + n, D), into out (num_heads, n, D)."""
        tokens, dim = q.shape[1:]
        end = start + tokens
        # each K/V head serves `group` query heads: view q as (kv_heads, group, n, D)
        grouped_q = q.reshape(self.num_kv_heads, self.group, tokens, dim)
        scores = grouped_q @ keys[:, None].swapaxes(-1, -2)  # (kv_heads, group, n, end): one head for the group
        scores *= np.float32(1 / math.sqrt(dim))
        if tokens > 1:  # causal: the token at position start + s sees positions 0 .. start + s (one token: all)
            seen = np.arange(end)[None, :] <= np.arange(start, end)[:, None]  # (n, end)
            scores[..., ~seen] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)  # the largest of a row is its own position's, always finite
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        out[...] = (scores @ values[:, None]).reshape(q.shape)
