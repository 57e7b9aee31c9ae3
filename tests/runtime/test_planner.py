"""Memory planning by liveness: no two operands that are alive at the same step share a buffer."""

import numpy as np
import pytest

from kuiper.runtime.planner import Lifetime, assign_buffers


def overlaps(a: Lifetime, b: Lifetime) -> bool:
    return a.first <= b.last and b.first <= a.last


def check_valid(lifetimes, assignment):
    for life in lifetimes:
        assert assignment.slot_sizes[assignment.slot_of[life.key]] >= life.size
    for i, a in enumerate(lifetimes):
        for b in lifetimes[i + 1:]:
            if overlaps(a, b):
                assert assignment.slot_of[a.key] != assignment.slot_of[b.key], (a, b)


def test_chain_reuses_two_buffers():
    # a straight chain: each tensor is read only by the next step, so two buffers ping-pong
    lifetimes = [Lifetime(i, 100, i, i + 1) for i in range(6)]
    assignment = assign_buffers(lifetimes)
    check_valid(lifetimes, assignment)
    assert len(assignment.slot_sizes) == 2
    assert assignment.total_bytes == 200


def test_skip_connection_is_not_overwritten_by_same_size_tensor():
    # step 0 makes `skip` (read again at step 3); steps 1 and 2 make same-sized tensors in between.
    # Reuse by size alone would hand `skip`'s buffer to one of them (KuiperInfer issue #60).
    lifetimes = [
        Lifetime("skip", 64, 0, 3),
        Lifetime("a", 64, 1, 2),
        Lifetime("b", 64, 2, 3),
        Lifetime("sum", 64, 3, 4),
    ]
    assignment = assign_buffers(lifetimes)
    check_valid(lifetimes, assignment)
    assert assignment.slot_of["a"] != assignment.slot_of["skip"]
    assert assignment.slot_of["b"] != assignment.slot_of["skip"]
    # `sum` is written at step 3 while skip and b are read at step 3: it needs a third buffer, and `a`'s
    # buffer (dead after step 2) is the one free
    assert assignment.slot_of["sum"] == assignment.slot_of["a"]


def test_best_fit_picks_smallest_free_buffer_and_grows_when_none_fits():
    lifetimes = [
        Lifetime("big", 1000, 0, 1),
        Lifetime("small", 10, 0, 1),
        Lifetime("next", 8, 2, 3),     # both free now: the 10-byte one fits best
        Lifetime("huge", 5000, 2, 3),  # nothing free fits: the largest free (1000) grows to 5000
    ]
    assignment = assign_buffers(lifetimes)
    check_valid(lifetimes, assignment)
    assert assignment.slot_of["next"] == assignment.slot_of["small"]
    assert assignment.slot_of["huge"] == assignment.slot_of["big"]
    assert sorted(assignment.slot_sizes) == [10, 5000]


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_never_share_while_alive(seed):
    rng = np.random.default_rng(seed)
    lifetimes = []
    for i in range(40):
        first = int(rng.integers(0, 30))
        lifetimes.append(Lifetime(i, int(rng.integers(1, 1000)), first, first + int(rng.integers(0, 8))))
    assignment = assign_buffers(lifetimes)
    check_valid(lifetimes, assignment)
    assert assignment.total_bytes <= sum(l.size for l in lifetimes)


def test_rejects_lifetime_that_ends_before_it_starts():
    with pytest.raises(ValueError):
        assign_buffers([Lifetime("x", 4, 3, 2)])
