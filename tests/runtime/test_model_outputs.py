"""Every committed model, run by RuntimeGraph on the host backends, matches the PyTorch outputs saved by the export
tool."""

import numpy as np
import pytest

import kuiper
from conftest import model_cases, model_names, model_paths


def assert_matches_torch(outputs, references):
    assert len(outputs) == len(references)
    for out, ref in zip(outputs, references):
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


@pytest.fixture(scope="module")
def graphs():
    cache = {}

    def get(name, backend="numpy"):
        if (name, backend) not in cache:
            param, bin_ = model_paths(name)
            cache[name, backend] = kuiper.RuntimeGraph(param, bin_, backend=backend).build()
        return cache[name, backend]

    return get


# numpy: the fast layers, fused; reference: the textbook layers, the operators as the file has them
@pytest.mark.parametrize("backend", ["numpy", "reference"])
@pytest.mark.parametrize("name", model_names())
def test_model_matches_pytorch_for_every_saved_case(graphs, name, backend):
    graph = graphs(name, backend)
    for case, inputs, references in model_cases(name):
        assert_matches_torch(graph.forward(*inputs), references)


def test_resnet18_at_batch_1_3_8_from_one_build(graphs):
    graph = graphs("resnet18")
    batches = {inputs[0].shape[0] for _, inputs, _ in model_cases("resnet18")}
    assert batches == {1, 3, 8}
    # alternate the shapes: each keeps its own cached plan, and results stay exact
    for _ in range(2):
        for case, inputs, references in model_cases("resnet18"):
            assert_matches_torch(graph.forward(*inputs), references)
    assert len(graph.plans) == 3


def test_graph_built_twice_and_forwarded_many_times_stays_exact():
    param, bin_ = model_paths("unet_tiny")
    cases = model_cases("unet_tiny")
    for _ in range(2):
        graph = kuiper.load(param, bin_, backend="numpy")
        for _ in range(3):
            for case, inputs, references in cases:
                assert_matches_torch(graph.forward(*inputs), references)


def test_outputs_are_fresh_arrays_not_overwritten_by_the_next_forward():
    param, bin_ = model_paths("unet_tiny")
    graph = kuiper.load(param, bin_, backend="numpy")
    (_, inputs, refs), = [c for c in model_cases("unet_tiny") if c[0] == "b2"]
    first = graph.forward(*inputs)
    graph.forward(*[np.zeros_like(x) for x in inputs])
    assert_matches_torch(first, refs)
