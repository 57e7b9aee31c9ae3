"""The plans a graph keeps: at most max_plans, the least recently used dropped first, its buffers released
through the executor; clear_plans() drops them all."""

import numpy as np
import pytest

import kuiper
from kuiper import ConfigError
from kuiper.runtime.graph import MAX_PLANS

from conftest import model_paths

PARAM = model_paths("act_zoo")[0]  # recorded at (2,7,5,9); any batch and image size runs


def x(batch, h=5, w=9):
    return np.zeros((batch, 7, h, w), np.float32)


def batches(graph) -> list:
    return [key[0][0][0] for key in graph.plans]


def test_the_least_recently_used_plan_goes_first_and_is_released(monkeypatch):
    graph = kuiper.load(PARAM, max_plans=2, backend="numpy")
    released = []
    monkeypatch.setattr(graph.executor, "release", released.append)
    graph.forward(x(1))
    graph.forward(x(2))  # kept: used again, now the most recent
    assert batches(graph) == [1, 2]
    first = graph.plans[(((1, 7, 5, 9), np.dtype(np.float32)),)]
    graph.forward(x(3))
    assert batches(graph) == [2, 3] and released == [first]


def test_a_service_fed_ever_new_sizes_keeps_a_bounded_number():
    graph = kuiper.load(PARAM, backend="numpy")
    for h in range(1, 3 * MAX_PLANS):
        graph.forward(x(1, h=h))
    assert len(graph.plans) == MAX_PLANS
    assert [key[0][0][2] for key in graph.plans] == list(range(2 * MAX_PLANS, 3 * MAX_PLANS))


def test_clear_plans_releases_every_plan_and_the_last_forwards_tensors(monkeypatch):
    graph = kuiper.load(PARAM, backend="numpy")
    graph.forward(x(1))
    released = []
    monkeypatch.setattr(graph.executor, "release", released.append)
    kept = list(graph.plans.values())
    graph.clear_plans()
    assert released == kept and not graph.plans
    assert all(operand.tensor is None for operand in graph.operands.values())
    outputs = graph.forward(x(1))  # planned anew
    assert len(outputs) == 13 and len(graph.plans) == 1


def test_plans_is_a_read_only_view():
    graph = kuiper.load(PARAM, backend="numpy")
    with pytest.raises(TypeError):
        graph.plans[()] = None
    view = graph.plans
    graph.forward(x(1))
    assert len(view) == 2  # a view: it follows the graph


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_max_plans_must_be_a_positive_int(bad):
    with pytest.raises(ConfigError, match=f"max_plans={bad!r}"):
        kuiper.RuntimeGraph(PARAM, max_plans=bad, backend="numpy")


def test_opencl_gives_an_evicted_plans_buffers_back_to_the_pool(cl_runtime, monkeypatch):
    from kuiper.opencl.devices import spec_of

    graph = kuiper.load(PARAM, backend="opencl", device=spec_of(cl_runtime.device), max_plans=1)
    recorded = next(iter(graph.plans.values()))
    slots = list(recorded.slots)
    given = []
    give = cl_runtime.pool.give
    monkeypatch.setattr(cl_runtime.pool, "give", lambda buffer: (given.append(buffer), give(buffer)))
    graph.forward(x(1))
    assert given == slots and recorded.slots == [] and batches(graph) == [1]
