"""Walk (kuiper/layers/walk.py): where a chain of permutes, reshapes and slices leaves each element, checked
against numpy doing the chain one copy at a time."""

import math

import numpy as np

from kuiper.layers.walk import Walk


def read(base: np.ndarray, walk: Walk, shape) -> np.ndarray:
    """The elements of `base` (contiguous) the walk picks, in order, as an array of `shape`."""
    sizes, strides = walk.fine()
    view = np.lib.stride_tricks.as_strided(base.reshape(-1)[walk.offset:], sizes,
                                           [s * base.itemsize for s in strides])
    return view.reshape(shape)


def factors(n: int, rng) -> tuple:
    """A random shape of n elements."""
    shape = []
    while n > 1:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = int(rng.choice(divisors))
        shape.append(d)
        n //= d
        if rng.random() < 0.2:
            shape.append(1)
    return tuple(int(d) for d in rng.permutation(shape)) or (1,)


def test_walks_follow_numpy_through_random_chains():
    rng = np.random.default_rng(7)
    followed = failed = 0
    for _ in range(400):
        shape = factors(int(rng.choice([24, 36, 48, 60, 64, 72, 96, 120])), rng)
        base = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        now, walk = base, Walk.dense(shape)
        for _ in range(5):
            step = rng.integers(3)
            if step == 0:
                axes = tuple(int(a) for a in rng.permutation(now.ndim))
                now, moved = np.ascontiguousarray(now.transpose(axes)), walk.permuted(axes)
            elif step == 1:
                target = factors(now.size, rng)
                now, moved = now.reshape(target), walk.reshaped(target)
            else:
                axis = int(rng.integers(now.ndim))
                n = now.shape[axis]
                step = int(rng.choice([d for d in range(1, n + 1) if n % d == 0]))  # whole blocks of step, often
                start = step * int(rng.integers(n // step))
                length = step * int(rng.integers(1, (n - start) // step + 1))
                now = np.ascontiguousarray(now[(slice(None),) * axis + (slice(start, start + length),)])
                moved = walk.narrowed(axis, start, length)
            if moved is None:  # what CopyChain does: copy what it has, walk on from that contiguous copy
                failed += 1
                base, moved = now, Walk.dense(now.shape)
            else:
                followed += 1
            walk = moved
            np.testing.assert_array_equal(read(base, walk, now.shape), now)
    assert followed > 1000 and failed > 50  # both kinds of step were exercised


def test_a_contiguous_walk_always_follows():
    walk = Walk.dense((6, 4))
    assert walk.reshaped((4, 6)) is not None and walk.reshaped((3, 8)) is not None
    assert walk.narrowed(0, 1, 3) is not None
    transposed = walk.permuted((1, 0))  # (4, 6), its rows 4 elements apart
    assert transposed.reshaped((6, 4)) is None  # the transposed elements read as (6, 4): no stride pattern does it
    assert transposed.reshaped((2, 2, 6)) is not None
    flat = transposed.reshaped((24,))  # one dim made of two finer ones
    assert flat.narrowed(0, 2, 6) is None  # not whole rows of 6
    base = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.testing.assert_array_equal(read(base, flat.narrowed(0, 6, 12), (12,)), base.T.reshape(-1)[6:18])
