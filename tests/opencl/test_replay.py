"""Replayed forwards (kuiper/opencl/replay.py): a plan's second forward is recorded and later ones enqueue the
recording. Every committed model, replayed on other inputs than it recorded, gives PyTorch's outputs; a replay
walks no layer, except those that cannot be replayed (state a layer keeps), which run live; profiling walks."""

import numpy as np
import pytest

import kuiper
from conftest import model_cases, model_names, model_paths
from kuiper import opencl
from kuiper.opencl.devices import spec_of
from kuiper.opencl.layer import OpenCLLayer


def other_inputs(inputs: list) -> list:
    """Inputs of the same shapes and dtypes with other values (integer inputs kept: they are token ids)."""
    rng = np.random.default_rng(5)
    return [rng.standard_normal(x.shape).astype(x.dtype) if x.dtype.kind == "f" else x for x in inputs]


@pytest.mark.parametrize("name", model_names())
def test_a_replayed_forward_gives_pytorchs_outputs(cl_runtime, name):
    param, bin_ = model_paths(name)
    graph = kuiper.load(param, bin_, backend="opencl", device=spec_of(cl_runtime.device))
    for _, inputs, refs in model_cases(name)[:2]:
        for _ in range(2):  # walked, then recorded
            graph.forward(*other_inputs(inputs))
        for out, ref in zip(graph.forward(*inputs), refs):  # replayed where the plan could be recorded
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def unet(cl_runtime):
    param, bin_ = model_paths("unet_tiny")
    (_, inputs, refs), = [c for c in model_cases("unet_tiny") if c[0] == "b2"]
    return kuiper.load(param, bin_, backend="opencl", device=spec_of(cl_runtime.device)), inputs, refs


def recorded(graph, inputs) -> None:
    """Two forwards of these shapes: the first walks the graph, the second records its plan."""
    for _ in range(2):
        graph.forward(*other_inputs(inputs))


def test_a_plan_used_once_is_not_recorded(cl_runtime):
    graph, inputs, refs = unet(cl_runtime)
    graph.forward(*inputs)
    assert graph.plan_for(*(x.shape for x in inputs)).replay is None


def test_a_replay_walks_no_layer(cl_runtime, monkeypatch):
    graph, inputs, refs = unet(cl_runtime)
    recorded(graph, inputs)
    plan = graph.plan_for(*(x.shape for x in inputs))
    assert plan.replay is not None and len(plan.replay) > 0

    def walked(*args):
        raise AssertionError("a replayed forward ran a layer's forward_opencl")
    for op in graph.order:
        if isinstance(op.layer, OpenCLLayer):
            monkeypatch.setattr(op.layer, "forward_opencl", walked)
    np.testing.assert_allclose(graph.forward(*inputs)[0], refs[0], rtol=1e-4, atol=1e-4 * np.abs(refs[0]).max())


def test_a_layer_that_keeps_state_runs_live_in_a_replay(cl_runtime, monkeypatch):
    """A layer with replayable = False is kept in the recording as itself: a replay enqueues the others' launches
    and calls its forward_opencl again, in its place."""
    graph, inputs, refs = unet(cl_runtime)
    layers = [op.layer for op in graph.order if isinstance(op.layer, OpenCLLayer)]
    stateful = layers[len(layers) // 2]
    monkeypatch.setattr(stateful, "replayable", False)
    recorded(graph, inputs)
    calls = []
    forward = stateful.forward_opencl

    def counted(*args):
        calls.append(1)
        return forward(*args)
    monkeypatch.setattr(stateful, "forward_opencl", counted)
    for layer in layers:
        if layer is not stateful:
            monkeypatch.setattr(layer, "forward_opencl", lambda *args: pytest.fail("a replayed layer walked"))
    np.testing.assert_allclose(graph.forward(*inputs)[0], refs[0], rtol=1e-4, atol=1e-4 * np.abs(refs[0]).max())
    assert calls == [1]


def test_profiling_walks_the_graph(cl_runtime):
    graph, inputs, refs = unet(cl_runtime)
    graph.forward(*inputs)
    graph.forward(*inputs, profile=True)
    assert len(graph.last_profile) == len([op for op in graph.order if op.layer is not None])


def test_plans_of_two_shapes_each_replay_their_own(cl_runtime):
    graph, inputs, refs = unet(cl_runtime)
    one = [x[:1] for x in inputs]
    expected_one = graph.forward(*one)[0]
    graph.forward(*other_inputs(inputs))
    for _ in range(2):
        np.testing.assert_allclose(graph.forward(*inputs)[0], refs[0], rtol=1e-4, atol=1e-4 * np.abs(refs[0]).max())
        np.testing.assert_array_equal(graph.forward(*one)[0], expected_one)


def test_a_variant_chosen_anew_is_recorded_anew(cl_runtime):
    """Switching a layer's kernel (as tests and measurements do) drops the recordings made before: the next
    forward runs, and records, the new variant."""
    graph, inputs, refs = unet(cl_runtime)
    recorded(graph, inputs)
    plan = graph.plan_for(*(x.shape for x in inputs))
    before = plan.replay
    assert before is not None
    op = next(op for op in graph.order if getattr(op.layer, "variants", None) is not None
              and len(op.layer.variants.candidates(tuple(plan.shapes[o.name] for o in op.input_operands))) > 1)
    shapes = tuple(plan.shapes[o.name] for o in op.input_operands)
    current = op.layer.variants.pick(shapes).name
    other = next(n for n in op.layer.variants.candidates(shapes) if n != current)
    op.layer.variants.use(shapes, other)
    np.testing.assert_allclose(graph.forward(*inputs)[0], refs[0], rtol=1e-4, atol=1e-4 * np.abs(refs[0]).max())
    assert plan.replay is not before and plan.replay is not None


def test_a_decode_step_replays_its_attention_over_the_pages(cl_runtime, monkeypatch):
    """A language model's attention layers hold its pool and page layouts: a replayed step refreshes the layout
    they read, uploaded once for all of them, and walks none of them, and the greedy tokens stay numpy's."""
    import kuiper.llm
    from conftest import MODELS

    path = MODELS / "llm" / "llama_gqa"
    ids = [5, 17, 42, 7]
    expected = list(kuiper.llm.load(path, backend="numpy").tokens(ids, 12))
    lm = kuiper.llm.load(path, backend="opencl", device=spec_of(cl_runtime.device))
    for _ in range(2):  # the prefill's plan recorded at the second call, a decode step's at its second step
        assert list(lm.tokens(ids, 12)) == expected
    refreshed = []
    for layer in lm.attention:
        assert layer.replayable
        monkeypatch.setattr(layer, "forward_opencl", lambda *args: pytest.fail("a replayed attention walked"))
        refresh = layer.refresh_opencl
        monkeypatch.setattr(layer, "refresh_opencl", lambda q, refresh=refresh: refreshed.append(1) or refresh(q))
    uploads = []
    write = opencl.Enqueuer.write
    monkeypatch.setattr(opencl.Enqueuer, "write", lambda q, buffer, array: uploads.append(buffer) or write(q, buffer,
                                                                                                        array))
    assert list(lm.tokens(ids, 12)) == expected
    assert len(refreshed) == 12 * len(lm.attention)  # the prefill and 11 decode steps
    pages = [layer.cl_pages for layer in lm.attention]
    assert len(lm.attention) > 1 and pages[1] is None  # the first layer's buffer serves every layer
    assert sum(buffer is pages[0] for buffer in uploads) == 12  # one upload of the layout a step
