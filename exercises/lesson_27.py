"""Lesson 27: Serving many requests. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 27`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or the definitions in the notes.
"""

import math  # noqa: F401

import numpy as np  # noqa: F401


def take_blocks(free: list, table: list, positions: int, block_size: int = 16) -> None:
    """Grow a sequence's block `table` (a list of block numbers, in position order) until it holds `positions`
    positions, taking each new block from `free` (a list of free block numbers): always the lowest free one,
    removed from `free`. Raise MemoryError, leaving both lists as they were, if `free` has too few.
    See course_notes/27-serving.md, exercise 1."""
    raise NotImplementedError('lesson 27: write take_blocks() in exercises/lesson_27.py; '
                              'see course_notes/27-serving.md, exercise 1')


def slots(table, start: int, count: int, block_size: int = 16):
    """The slots (int64 array of `count`) where positions start .. start + count - 1 of a sequence live, through
    its block table: position p at table[p // block_size] * block_size + p % block_size.
    See course_notes/27-serving.md, exercise 2."""
    raise NotImplementedError('lesson 27: write slots() in exercises/lesson_27.py; '
                              'see course_notes/27-serving.md, exercise 2')


def pack(entries):
    """One step's forward inputs for several sequences: `entries` is a list of (length, new_ids), a sequence's
    length so far (positions 0 .. length - 1 are in its cache) and the token ids it adds. Returns (ids (1, T)
    int64, positions (T,) int64, spans), the ids one sequence after the other, each at positions length,
    length + 1, ..., and spans a list of (first, count, start): where each sequence's tokens sit in the row, how
    many, and the position of the first. See course_notes/27-serving.md, exercise 3."""
    raise NotImplementedError('lesson 27: write pack() in exercises/lesson_27.py; '
                              'see course_notes/27-serving.md, exercise 3')


def paged_attention(q, pool_k, pool_v, table, start: int, block_size: int = 16):
    """Causal grouped-query attention of one sequence's new queries q (H, n, D), at positions start .. start + n
    - 1, over its keys and values in a paged pool: pool_k and pool_v (KV, slots, D) already hold positions
    0 .. start + n - 1 at the slots its block `table` gives. Query head h reads K/V head h // (H / KV); the token
    at position p sees positions 0 .. p; scores scaled by 1 / sqrt(D). Returns (H, n, D) float32.
    See course_notes/27-serving.md, exercise 4."""
    raise NotImplementedError('lesson 27: write paged_attention() in exercises/lesson_27.py; '
                              'see course_notes/27-serving.md, exercise 4')
