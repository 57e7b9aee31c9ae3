"""Walks: where a tensor's elements sit in the buffer of the tensor it was moved from, so that a chain of
permutes, transposes, reshapes and split pieces is one strided copy (kuiper/layers/copy_chain.py, made by the
copies pass, kuiper/runtime/copies.py). Each moving layer says how it changes a walk (its `walked` method)."""

from __future__ import annotations

import math
from typing import NamedTuple


def contiguous_strides(shape) -> tuple:
    """Row-major strides, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class Walk(NamedTuple):
    """Where a tensor's elements sit in a source buffer: for each dim of the tensor, the finer dims it is made
    of as (size, stride) pairs, outermost first, strides in elements of the source (dims of size 1 are left out:
    their stride never matters); and the source offset of its first element.

    A permute reorders the dims, a reshape regroups the finer dims, a slice narrows one. A chain of operators that
    only move elements is therefore one walk over its first input: one strided copy, where running the chain
    would copy once per operator (kuiper/layers/copy_chain.py). The methods return None where the walk cannot
    follow, and a contiguous tensor's walk can always follow."""

    dims: tuple
    offset: int = 0

    @classmethod
    def dense(cls, shape) -> "Walk":
        """A contiguous tensor of `shape`."""
        return cls(tuple(((n, s),) if n != 1 else () for n, s in zip(shape, contiguous_strides(shape))))

    def permuted(self, axes) -> "Walk":
        return self._replace(dims=tuple(self.dims[a] for a in axes))

    def reshaped(self, shape) -> "Walk | None":
        """The same elements, in the same order, as `shape`: each new dim takes the next finer dims whose sizes
        multiply to it, a finer dim split in two where a new dim ends inside it. None where a new dim would end
        inside a finer dim whose size it does not divide (a transposed (6, 4) read as (4, 6))."""
        fine = []
        for size, stride in (d for dims in self.dims for d in dims):
            if fine and fine[-1][1] == stride * size:  # contiguous neighbours: one finer dim
                fine[-1] = (fine[-1][0] * size, stride)
            else:
                fine.append((size, stride))
        dims, i = [], 0
        for n in shape:
            group, have = [], 1
            while have < n and i < len(fine):
                size, stride = fine[i]
                if n % (have * size) == 0:
                    group.append(fine[i])
                    have, i = have * size, i + 1
                elif n % have == 0 and size % (n // have) == 0:
                    outer = n // have
                    group.append((outer, stride * (size // outer)))
                    fine[i] = (size // outer, stride)
                    have = n
                else:
                    return None
            if have != n:
                return None
            dims.append(tuple(group))
        return self._replace(dims=tuple(dims)) if i == len(fine) else None

    def narrowed(self, axis: int, start: int, length: int) -> "Walk | None":
        """Elements start..start+length of dim `axis`; None where they do not begin and end on whole steps of its
        outermost finer dim."""
        dims = self.dims[axis]
        if not dims:  # a dim of size 1: all of it
            return self
        inner = math.prod(size for size, _ in dims[1:])
        if start % inner or length % inner:
            return None
        stride = dims[0][1]
        outer = ((length // inner, stride),) if length // inner != 1 else ()
        return Walk(self.dims[:axis] + (outer + dims[1:],) + self.dims[axis + 1:],
                    self.offset + start // inner * stride)

    def fine(self) -> tuple:
        """(sizes, strides) of the finer dims, in the tensor's element order: the walk as StridedCopy takes it."""
        pairs = [d for dims in self.dims for d in dims]
        return tuple(size for size, _ in pairs), tuple(stride for _, stride in pairs)
