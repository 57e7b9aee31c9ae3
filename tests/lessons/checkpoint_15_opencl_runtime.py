"""Checkpoint of lesson 15: the pool of exercises/lesson_15.py, driven with the same requests as kuiper's
BufferPool: it must hand out the very same buffers and allocate exactly as often."""

import numpy as np
import pytest

from kuiper.opencl import BufferPool
from lesson_tools import exercise

ex = exercise(15)


class Buffer:
    """A stand-in for a device buffer: a size and a serial number."""

    def __init__(self, size, serial):
        self.size, self.serial = size, serial


class Allocator:
    def __init__(self):
        self.made = 0

    def allocate(self, nbytes):
        self.made += 1
        return Buffer(max(int(nbytes), 4), self.made)


class FakeRuntime(Allocator):
    """What BufferPool needs of an OpenCLRuntime: allocate(nbytes)."""


def test_best_fit_reuses_the_smallest_buffer_that_fits():
    pool = ex.BestFitPool(Allocator().allocate)
    small, big = pool.take(1000), pool.take(4000)
    pool.give(big)
    pool.give(small)
    assert pool.take(800) is small and pool.take(2000) is big and pool.allocations == 2
    assert pool.take(5000).size == 5000 and pool.allocations == 3


@pytest.mark.parametrize("seed", range(10))
def test_the_same_buffers_as_kuipers_pool(seed):
    rng = np.random.default_rng(seed)
    mine, theirs = ex.BestFitPool(Allocator().allocate), BufferPool(FakeRuntime())
    held_mine, held_theirs = [], []
    for _ in range(200):
        if held_mine and rng.random() < 0.45:
            k = int(rng.integers(len(held_mine)))
            mine.give(held_mine.pop(k))
            theirs.give(held_theirs.pop(k))
        else:
            nbytes = int(rng.choice([0, 3, 4, 100, 256, 1000, 1024, 4096, int(rng.integers(1, 5000))]))
            a, b = mine.take(nbytes), theirs.take(nbytes)
            assert (a.serial, a.size) == (b.serial, b.size), nbytes
            held_mine.append(a)
            held_theirs.append(b)
    assert mine.allocations == theirs.allocations
