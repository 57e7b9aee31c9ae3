"""Every committed model on backend="opencl", both schedules, against PyTorch's saved outputs."""

import warnings

import numpy as np
import pytest

import kuiper
from conftest import model_cases, model_names, model_paths
from test_model_outputs import assert_matches_torch
from kuiper.opencl.devices import spec_of


@pytest.fixture(scope="module")
def opencl_graphs(cl_runtime):
    cache = {}
    device = spec_of(cl_runtime.device)

    def get(name, schedule):
        key = (name, schedule)
        if key not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", kuiper.KuiperWarning)  # host fallbacks are listed, not errors
                cache[key] = kuiper.load(*model_paths(name), backend="opencl", device=device, schedule=schedule)
        return cache[key]

    return get


@pytest.mark.parametrize("schedule", ["inorder", "levels"])
@pytest.mark.parametrize("name", model_names())
def test_model_on_opencl_matches_pytorch(opencl_graphs, name, schedule):
    graph = opencl_graphs(name, schedule)
    for case, inputs, references in model_cases(name):
        assert_matches_torch(graph.forward(*inputs), references)


def test_both_schedules_give_identical_results(opencl_graphs):
    (_, inputs, _), = [c for c in model_cases("unet_tiny") if c[0] == "b2"]
    inorder = opencl_graphs("unet_tiny", "inorder").forward(*inputs)
    levels = opencl_graphs("unet_tiny", "levels").forward(*inputs)
    for a, b in zip(inorder, levels):
        np.testing.assert_array_equal(a, b)


def test_profile_reports_device_time_per_operator(opencl_graphs):
    graph = opencl_graphs("act_zoo", "inorder")
    (_, inputs, _), = model_cases("act_zoo")
    graph.forward(*inputs, profile=True)
    kernels = [(op, device) for op, host, device in graph.last_profile if op.layer.supports_opencl]
    assert kernels and all(device is not None and device > 0 for _, device in kernels)
