"""Causal grouped-query attention over a KV cache: how a decoder attends while it generates.

A decoder produces text one token at a time, and token p may look at tokens 0..p only (causal). Recomputing
every earlier token's key and value at each step would make generating n tokens cost n^2 projections; instead
each step's keys and values are written into a cache, and a new token's query reads them all from there. The
first step (prefill) runs the whole prompt at once, positions 0..n-1; then each step runs one token:

    cache_k[:, :, positions] = k;  cache_v[:, :, positions] = v
    out[b, h, s] = softmax(q[b, h, s] . cache_k[b, g, 0..p] / sqrt(head_dim)) @ cache_v[b, g, 0..p]
                   p = positions[s],   g = h // (num_heads / num_kv_heads)

Grouped-query attention (GQA): fewer key/value heads than query heads, each K/V head serving
num_heads / num_kv_heads consecutive query heads. The cache, which grows with the context, shrinks by the same
factor (Llama 3 8B: 32 query heads, 8 KV heads, a quarter of the cache). num_kv_heads = num_heads is ordinary
multi-head attention, num_kv_heads = 1 multi-query attention.

Inputs: q (B, num_heads, S, head_dim), k and v (B, num_kv_heads, S, head_dim), already rotated (rotary.py), and
positions (S,) int64. Output: (B, num_heads, S, head_dim), as F.scaled_dot_product_attention gives.

The cache is state the layer keeps between forwards, preallocated to `max_positions` (2 x B x num_kv_heads x
max_positions x head_dim floats) when it first meets a batch size, and counted as the layer's workspace, which
it keeps, so that the graph's memory limit covers it before anything is allocated. `filled` is how many
positions it holds: a forward may start at any position up to `filled` (0 starts a new sequence, `filled`
continues it, anything between rewinds) and must run consecutive positions; `reset()` empties it. Keys and
values past the positions a query may see are never read, so nothing needs clearing between sequences.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.errors import InputError
from kuiper.layers.base import Layer
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
        self.cache_k = self.cache_v = None  # (B, num_kv_heads, max_positions, head_dim) each, made at first use
        self.filled = 0

    def reset(self) -> None:
        """Start a new sequence: the cache holds no position (its memory stays allocated)."""
        self.filled = 0

    def cache_bytes(self, batch: int) -> int:
        """Bytes of the keys and values cached for `batch` sequences of max_positions tokens."""
        return 2 * batch * self.num_kv_heads * self.max_positions * self.head_dim * 4

    def output_shapes(self, input_shapes):
        q, k, v, positions = (tuple(s) for s in input_shapes)
        if len(q) != 4 or q[1] != self.num_heads or q[3] != self.head_dim:
            raise self.shape_error(f"expects q (B, {self.num_heads}, S, {self.head_dim}), got {q}")
        kv = (q[0], self.num_kv_heads, q[2], self.head_dim)
        if k != kv or v != kv:
            raise self.shape_error(f"expects k and v {kv} for q {q}, got {k} and {v}")
        if positions != (q[2],):
            raise self.shape_error(f"expects positions ({q[2]},), one per token of q {q}, got {positions}")
        if q[2] > self.max_positions:
            raise self.shape_error(f"{q[2]} tokens do not fit the cache of max_positions={self.max_positions}")
        return [q]

    def output_dtypes(self, input_dtypes):
        if np.dtype(input_dtypes[3]).kind not in "iu":
            raise self.shape_error(f"expects integer positions, got {np.dtype(input_dtypes[3])}")
        return [np.dtype(np.float32)]

    def workspace_bytes(self, input_shapes):
        # the cache alone: the scores, (B, num_heads, S, positions so far), are a temporary of forward, as other
        # layers' are
        return self.cache_bytes(input_shapes[0][0])

    def macs(self, input_shapes, output_shapes):
        batch, _, tokens, _ = input_shapes[0]
        return 2 * batch * self.num_heads * tokens * self.max_positions * self.head_dim  # at most: q.k, then @ v

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

    def forward_numpy(self, inputs, outputs):
        q, k, v, positions = inputs
        batch, _, tokens, dim = q.shape
        start = self.check_positions(positions)
        if self.cache_k is None or self.cache_k.shape[0] != batch:
            shape = (batch, self.num_kv_heads, self.max_positions, dim)
            self.cache_k, self.cache_v = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
            if start:
                raise InputError(f"{self.op.type} operator '{self.op.name}': a new batch size ({batch}) starts a "
                                 f"new cache, at position 0, not {start}")
        end = start + tokens
        self.cache_k[:, :, start:end] = k
        self.cache_v[:, :, start:end] = v
        self.filled = end

        # each K/V head serves `group` query heads: view q as (B, kv_heads, group, S, D)
        grouped_q = q.reshape(batch, self.num_kv_heads, self.group, tokens, dim)
        keys = self.cache_k[:, :, None, :end]      # (B, kv_heads, 1, end, D): one head for the whole group
        values = self.cache_v[:, :, None, :end]
        scores = grouped_q @ keys.swapaxes(-1, -2)  # (B, kv_heads, group, S, end)
        scores *= np.float32(1 / math.sqrt(dim))
        # causal: the token at position start + s sees cache positions 0 .. start + s
        seen = np.arange(end)[None, :] <= np.arange(start, end)[:, None]  # (S, end)
        scores[..., ~seen] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)  # the largest of a row is its own position's, always finite
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        outputs[0][...] = (scores @ values).reshape(q.shape)
