"""Checkpoint of lesson 10: exercises/lesson_10.py's lifetimes, held to kuiper's planner on every committed
model, and its slot assignment, checked for what a plan must guarantee: no two operands alive at once share a
slot, no assignment could use fewer, and the skip connection comes out right."""

import numpy as np
import pytest

import kuiper
from lesson_tools import MODEL_PARAMS, exercise

ex = exercise(10)


def steps_of(graph):
    """The built graph's execution order as [(operands written, operands read)]."""
    return [([o.name for o in op.output_operands], [o.name for o in op.input_operands]) for op in graph.order]


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_lifetimes_are_the_planners(param):
    graph = kuiper.load(param, backend="reference")         # no fusion: no operand overwrites another
    plan = next(iter(graph.plans.values()))
    got = ex.lifetimes(steps_of(graph))
    assert plan.lifetimes
    for life in plan.lifetimes:                               # the planner leaves out graph inputs and outputs
        assert got[life.key] == (life.first, life.last), life.key
    inputs = {o.name for op in graph.input_operators for o in op.output_operands}
    written = {name for names, _ in steps_of(graph) for name in names}
    assert set(got) == written and not inputs - written


def check_assignment(lives, slot_of):
    assert set(slot_of) == set(lives)
    for a, (a_first, a_last) in lives.items():
        for b, (b_first, b_last) in lives.items():
            if a < b and slot_of[a] == slot_of[b]:
                assert a_last < b_first or b_last < a_first, f"{a} {lives[a]} and {b} {lives[b]} share a slot"
    steps = range(min(f for f, _ in lives.values()), max(l for _, l in lives.values()) + 1)
    most_alive = max(sum(f <= s <= l for f, l in lives.values()) for s in steps)
    assert len(set(slot_of.values())) == most_alive           # fewer cannot work: that many are alive at once


@pytest.mark.parametrize("seed", range(20))
def test_assign_slots_on_random_lifetimes(seed):
    rng = np.random.default_rng(seed)
    lives = {}
    for k in range(int(rng.integers(1, 30))):
        first = int(rng.integers(0, 20))
        lives[f"t{k}"] = (first, first + int(rng.integers(0, 8)))
    check_assignment(lives, ex.assign_slots(lives))


@pytest.mark.parametrize("param", MODEL_PARAMS[:6], ids=lambda p: p.parent.name)
def test_assign_slots_on_the_models(param):
    graph = kuiper.load(param, backend="reference")
    lives = {life.key: (life.first, life.last) for life in next(iter(graph.plans.values())).lifetimes}
    check_assignment(lives, ex.assign_slots(lives))


def test_the_skip_connection_comes_out_right():
    steps = [("t3", [], None), ("t4", ["t3"], lambda v: 2 * v), ("t5", ["t4"], lambda v: np.maximum(v, 0)),
             ("t6", ["t5"], lambda v: v - 1), ("t7", ["t6", "t3"], lambda a, b: a + b)]
    lives = ex.lifetimes([([name], reads) for name, reads, _ in steps])
    assert lives == {"t3": (0, 4), "t4": (1, 2), "t5": (2, 3), "t6": (3, 4), "t7": (4, 4)}
    slot_of = ex.assign_slots(lives)
    slots, x = {}, np.array([-1.0, 2.0])
    for name, reads, function in steps:
        slots[slot_of[name]] = x if function is None else function(*[slots[slot_of[r]] for r in reads])
    np.testing.assert_array_equal(slots[slot_of["t7"]], [-2.0, 5.0])
    assert len(set(slot_of.values())) == 3
