"""Models run with the example custom operators, on both backends, against PyTorch's saved outputs; how
a graph finds its configs (custom_ops=, KUIPER_CUSTOM_OPS, --custom-op); and that an override stays
inside the graph that asked for it."""

import os
import warnings

import numpy as np
import pytest

import kuiper
from kuiper import UnsupportedOperatorError
from kuiper.custom import ENV_VAR, CustomLayer
from kuiper.layers.hardtanh import Hardtanh
from kuiper.layers.registry import layer_class
from kuiper.app.cli import main
from conftest import MODELS, NO_OPENCL, OPENCL_DEVICES, load_manifest, model_cases, model_paths
from custom_op_files import CHANNEL_SCALE, EXAMPLES, LEAKY_CLAMP
from kuiper.opencl.devices import spec_of

ENTRY = load_manifest()["custom_op_models"]["custom_scale"]
PARAM = MODELS / ENTRY["param"]
CASES = [(case["name"], [np.load(MODELS / p) for p in case["inputs"]], [np.load(MODELS / p) for p in case["outputs"]])
         for case in ENTRY["cases"]]


@pytest.fixture(params=["numpy", "opencl"])
def backend(request):
    if request.param == "opencl" and not OPENCL_DEVICES:
        pytest.skip(NO_OPENCL)
    return request.param


def assert_matches_torch(outputs, references):
    """The project's tolerance against PyTorch: rtol 1e-4, atol 1e-4 scaled by the reference's range."""
    assert len(outputs) == len(references)
    for out, ref in zip(outputs, references):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def run_cli(argv, capsys) -> tuple:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_manifest_names_the_configs_the_model_needs():
    assert [(MODELS / p).resolve() for p in ENTRY["custom_ops"]] == [CHANNEL_SCALE]
    assert "custom_scale" not in load_manifest()["models"]  # suites over "models" use built-in layers only
    assert ENTRY["operator_types"][0] == "ChannelScale"     # pnnx wrote the module's class name as its type


def test_without_its_config_the_model_does_not_build():
    with pytest.raises(UnsupportedOperatorError, match="no layer for 'ChannelScale' \\(operator channel_scale\\)"):
        kuiper.load(PARAM, backend="numpy")


@pytest.mark.parametrize("configs", [[CHANNEL_SCALE], [EXAMPLES]], ids=["channel_scale", "both_examples"])
def test_custom_scale_matches_pytorch(backend, configs):
    graph = kuiper.load(PARAM, backend=backend, custom_ops=configs)
    served = {op.name: op.layer.config.path for op in graph.order if isinstance(op.layer, CustomLayer)}
    expected = {"channel_scale": CHANNEL_SCALE} | ({"hardtanh": LEAKY_CLAMP} if configs == [EXAMPLES] else {})
    assert served == expected
    for _ in range(2):  # the shapes alternate: each has its own plan and, on OpenCL, its own kernel build
        for case, inputs, references in CASES:
            assert_matches_torch(graph.forward(*inputs), references)


def test_levels_schedule_and_one_program_per_new_shape(cl_runtime):
    device = spec_of(cl_runtime.device)
    graph = kuiper.load(PARAM, backend="opencl", device=device, schedule="levels", custom_ops=EXAMPLES)
    _, (x,), references = CASES[0]
    assert_matches_torch(graph.forward(x), references)
    built = cl_runtime.programs_built
    x3 = np.ascontiguousarray(np.concatenate([x, x[:1]])[:, :, :5, :3])  # a shape no test uses
    graph.forward(x3)
    assert cl_runtime.programs_built == built + 2  # the two custom kernels, for the new shape
    graph.forward(x3)
    assert cl_runtime.programs_built == built + 2


def test_an_override_stays_in_its_graph():
    """act_zoo's Hardtanh through the leaky clamp kernel (slope 0) still matches PyTorch; other graphs and
    the global registry keep the built-in layer."""
    param, bin_ = model_paths("act_zoo")
    (_, inputs, references), = model_cases("act_zoo")
    overridden = kuiper.load(param, bin_, custom_ops=[LEAKY_CLAMP], backend="numpy")
    plain = kuiper.load(param, bin_, backend="numpy")
    for graph, layer_type in ((overridden, CustomLayer), (plain, Hardtanh)):
        (op,) = [op for op in graph.operators if op.type == "nn.Hardtanh"]
        assert isinstance(op.layer, layer_type)  # the numpy backend may run a fast subclass (kuiper/cpu/)
    hardtanh = overridden.forward(*inputs)[2]
    assert_matches_torch([hardtanh], references[2:3])
    np.testing.assert_array_equal(hardtanh, plain.forward(*inputs)[2])  # both clip the same floats exactly
    assert layer_class("nn.Hardtanh") is Hardtanh


def test_the_environment_variable_names_files_and_directories(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(EXAMPLES / "channel_scale"), "", str(LEAKY_CLAMP)]))
    graph = kuiper.load(PARAM, backend="numpy")
    assert sorted(c.path.name for c in graph.custom_ops) == ["channel_scale.toml", "leaky_clamp.toml"]
    _, inputs, references = CASES[1]
    assert_matches_torch(graph.forward(*inputs), references)
    # the argument adds to the variable; naming a file again reads it once
    assert len(kuiper.RuntimeGraph(PARAM, custom_ops=CHANNEL_SCALE, backend="numpy").custom_ops) == 2

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.toml"))
    with pytest.raises(kuiper.CustomOpError, match=rf"missing.toml: no such custom operator config \(from \${ENV_VAR}"):
        kuiper.RuntimeGraph(PARAM, backend="numpy")


@pytest.mark.usefixtures("cl_runtime")
def test_kuiper_run_with_custom_op(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error", kuiper.KuiperWarning)  # every operator runs on the device: no host fallback
        status, out, err = run_cli(["run", str(PARAM), "--backend", "opencl", "--batch", "1",
                                    "--custom-op", str(EXAMPLES / "channel_scale"), "--custom-op", str(LEAKY_CLAMP)],
                                   capsys)
    assert status == 0, err
    assert "output 0: shape (1, 5, 4, 6)" in out and "matches the saved PyTorch output" in out


def test_kuiper_inspect_lists_the_custom_operators(capsys):
    status, out, err = run_cli(["inspect", str(PARAM), "--custom-op", str(EXAMPLES)], capsys)
    assert status == 0, err
    listing = out.split("served by custom OpenCL operators:\n", 1)[1].splitlines()
    assert listing == [f"  channel_scale (ChannelScale) <- {CHANNEL_SCALE}",
                       f"  hardtanh (nn.Hardtanh) <- {LEAKY_CLAMP}"]


def test_kuiper_inspect_without_the_config_shows_the_missing_type(capsys):
    status, out, _ = run_cli(["inspect", str(PARAM)], capsys)
    assert status == 0
    assert "operator types with no layer:" in out and "ChannelScale: channel_scale" in out
