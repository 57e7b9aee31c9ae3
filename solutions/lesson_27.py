"""Lesson 27: Serving many requests. Reference solutions."""

import math

import numpy as np


def take_blocks(free: list, table: list, positions: int, block_size: int = 16) -> None:
    """Grow a sequence's block `table` (a list of block numbers, in position order) until it holds `positions`
    positions, taking each new block from `free` (a list of free block numbers): always the lowest free one,
    removed from `free`. Raise MemoryError, leaving both lists as they were, if `free` has too few.
    See course_notes/27-serving.md, exercise 1."""
    needed = -(-positions // block_size) - len(table)
    if needed <= 0:
        return
    if needed > len(free):
        raise MemoryError(f"{needed} blocks needed, {len(free)} free")
    free.sort()
    table.extend(free[:needed])
    del free[:needed]


def slots(table, start: int, count: int, block_size: int = 16):
    """The slots (int64 array of `count`) where positions start .. start + count - 1 of a sequence live, through
    its block table: position p at table[p // block_size] * block_size + p % block_size.
    See course_notes/27-serving.md, exercise 2."""
    p = np.arange(start, start + count)
    return np.asarray(table, np.int64)[p // block_size] * block_size + p % block_size


def pack(entries):
    """One step's forward inputs for several sequences: `entries` is a list of (length, new_ids), a sequence's
    length so far (positions 0 .. length - 1 are in its cache) and the token ids it adds. Returns (ids (1, T)
    int64, positions (T,) int64, spans), the ids one sequence after the other, each at positions length,
    length + 1, ..., and spans a list of (first, count, start): where each sequence's tokens sit in the row, how
    many, and the position of the first. See course_notes/27-serving.md, exercise 3."""
    ids, positions, spans, first = [], [], [], 0
    for length, new in entries:
        ids.extend(new)
        positions.extend(range(length, length + len(new)))
        spans.append((first, len(new), length))
        first += len(new)
    return np.array(ids, np.int64).reshape(1, -1), np.array(positions, np.int64), spans


def paged_attention(q, pool_k, pool_v, table, start: int, block_size: int = 16):
    """Causal grouped-query attention of one sequence's new queries q (H, n, D), at positions start .. start + n
    - 1, over its keys and values in a paged pool: pool_k and pool_v (KV, slots, D) already hold positions
    0 .. start + n - 1 at the slots its block `table` gives. Query head h reads K/V head h // (H / KV); the token
    at position p sees positions 0 .. p; scores scaled by 1 / sqrt(D). Returns (H, n, D) float32.
    See course_notes/27-serving.md, exercise 4."""
    heads, tokens, dim = q.shape
    end = start + tokens
    where = slots(table, 0, end, block_size)
    group = heads // pool_k.shape[0]
    keys = np.repeat(pool_k[:, where], group, axis=0).astype(np.float64)      # (H, end, D)
    values = np.repeat(pool_v[:, where], group, axis=0).astype(np.float64)
    scores = q.astype(np.float64) @ keys.transpose(0, 2, 1) / math.sqrt(dim)  # (H, n, end)
    seen = np.arange(end)[None, :] <= np.arange(start, end)[:, None]
    scores = np.where(seen, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ values).astype(np.float32)
