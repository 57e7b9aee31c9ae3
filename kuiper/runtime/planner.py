"""Memory planning by liveness.

Every operand an operator writes lives from the step that produces it to the last step that reads it.
Two operands may share one buffer only when their lifetimes do not overlap. The C++ original reused
buffers whenever the sizes matched, which broke branched graphs (a ResNet skip connection is still
needed after the main branch has produced a tensor of the same size: KuiperInfer issue #60). Planning
from lifetimes over the fixed execution order makes reuse safe by construction.

The algorithm is a greedy walk over the steps with a best-fit free list:
  at step i, first give each operand born at i the smallest free buffer that fits (or grow the largest
  free one, or make a new one), then return to the free list every buffer whose operand dies at i.
Outputs are placed before the step's dying inputs are released, so an operator never writes into a
buffer it is still reading.

The assignment is plain data (slots and sizes), so the numpy backend and the OpenCL buffer pool share it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lifetime:
    """An operand that needs a buffer: `size` bytes, written at step `first`, last read at step `last`."""

    key: object
    size: int
    first: int
    last: int


@dataclass
class BufferAssignment:
    """Which slot each operand uses, and how large each slot must be."""

    slot_of: dict = field(default_factory=dict)
    slot_sizes: list = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(self.slot_sizes)


def assign_buffers(lifetimes: list) -> BufferAssignment:
    """Give every lifetime a slot so that overlapping lifetimes never share one (best-fit reuse)."""
    result = BufferAssignment()
    born = {}
    dying = {}
    for life in lifetimes:
        if life.last < life.first:
            raise ValueError(f"lifetime of {life.key!r} ends before it starts")
        born.setdefault(life.first, []).append(life)
        dying.setdefault(life.last, []).append(life)

    free = []  # sorted list of (size, slot)
    for step in sorted(set(born) | set(dying)):
        # larger operands first: they have the fewest buffers to choose from
        for life in sorted(born.get(step, ()), key=lambda l: -l.size):
            result.slot_of[life.key] = _take(free, result.slot_sizes, life.size)
        for life in dying.get(step, ()):
            slot = result.slot_of[life.key]
            bisect.insort(free, (result.slot_sizes[slot], slot))
    return result


def _take(free: list, slot_sizes: list, size: int) -> int:
    """Best fit: the smallest free slot holding `size` bytes; else grow the largest free slot; else a new one."""
    i = bisect.bisect_left(free, (size, -1))
    if i < len(free):
        return free.pop(i)[1]
    if free:
        _, slot = free.pop()
        slot_sizes[slot] = size
        return slot
    slot_sizes.append(size)
    return len(slot_sizes) - 1
