"""backend="auto", the default (kuiper/runtime/auto.py): the rule on made-up device lists and on the devices at
hand, KUIPER_BACKEND, a named device, the fall back to numpy where opencl cannot build a model, and the line the
CLI prints."""

import shutil

import numpy as np
import pytest

import kuiper
from kuiper.app.cli import main
from kuiper.opencl import devices
from kuiper.runtime import auto
from conftest import MODELS, OPENCL_DEVICES

ACT_ZOO = MODELS / "act_zoo" / "act_zoo.pnnx.param"
LEAKY_CLAMP = MODELS.parent / "examples" / "custom_ops" / "leaky_clamp"
INTEL = devices.INTEL_CPU_PLATFORM
POCL = "Portable Computing Language"


@pytest.fixture
def default(monkeypatch):
    """The default as a user meets it: no KUIPER_BACKEND (the suite's conftest sets numpy), no device named."""
    monkeypatch.delenv(auto.ENV, raising=False)
    monkeypatch.delenv("KUIPER_CL_DEVICE", raising=False)


def choose(*candidates, problems=None):
    """The rule over these candidates; also the specs whose usability it asked about."""
    problems = problems or {}
    asked = []

    def problem(candidate):
        asked.append(candidate.spec)
        return problems.get(candidate.spec)

    return auto.rule([auto.Candidate(*c) for c in candidates], problem), asked


def test_a_usable_gpu_comes_first():
    choice, _ = choose(("0:0", "CPU", INTEL), ("1:0", "GPU", "NVIDIA CUDA"), ("1:1", "GPU", "NVIDIA CUDA"),
                       problems={"1:0": "the test kernel computed wrong values"})
    assert (choice.backend, choice.device) == ("opencl", "1:1")
    assert "GPU" in choice.reason


def test_on_a_cpu_intels_runtime_and_not_pocl():
    choice, asked = choose(("0:0", "CPU", POCL), ("1:0", "CPU", INTEL))
    assert (choice.backend, choice.device) == ("opencl", "1:0")
    assert "Intel" in choice.reason
    assert asked == ["1:0"]  # PoCL is never a candidate, so never probed


@pytest.mark.parametrize("candidates, problems", [
    ([], {}),
    ([("0:0", "CPU", POCL)], {}),
    ([("0:0", "CPU", INTEL), ("1:0", "GPU", "NVIDIA CUDA")], {"0:0": "no device", "1:0": "no device"}),
    ([("0:0", "ACCELERATOR", "FPGA")], {}),
], ids=["nothing", "pocl_only", "none_usable", "accelerator"])
def test_else_numpy(candidates, problems):
    choice, _ = choose(*candidates, problems=problems)
    assert (choice.backend, choice.device) == ("numpy", None)


def test_the_rule_on_the_devices_at_hand():
    """What this machine gets: opencl on a usable GPU or Intel CPU runtime if there is one (the usable devices of
    the OpenCL tests' parametrization), else numpy."""
    choice = auto.resolved()
    listed = {f"{p}:{d}": (platform.name.strip(), device) for p, d, platform, device in devices.all_devices()} \
        if OPENCL_DEVICES else {}
    gpus = [s for s in OPENCL_DEVICES if devices.is_gpu(listed[s][1])]
    intel = [s for s in OPENCL_DEVICES if devices.is_cpu(listed[s][1]) and listed[s][0] == INTEL]
    if gpus:
        assert (choice.backend, choice.device) == ("opencl", min(gpus, key=OPENCL_DEVICES.index))
    elif intel:
        assert (choice.backend, choice.device) == ("opencl", intel[0])
    else:
        assert (choice.backend, choice.device) == ("numpy", None)
    assert auto.resolved() is choice  # once per process


def test_a_graph_says_what_the_default_became(default):
    graph = kuiper.RuntimeGraph(ACT_ZOO)
    assert (graph.backend, graph.device, graph.choice) == (auto.resolved().backend, auto.resolved().device,
                                                           auto.resolved())
    assert kuiper.RuntimeGraph(ACT_ZOO, backend="numpy").choice is None  # named: nothing to say


def test_kuiper_backend_replaces_the_default(default, monkeypatch):
    monkeypatch.setenv(auto.ENV, "reference")
    graph = kuiper.RuntimeGraph(ACT_ZOO)
    assert (graph.backend, graph.choice) == ("reference", None)
    assert kuiper.RuntimeGraph(ACT_ZOO, backend="numpy").backend == "numpy"  # an argument wins
    monkeypatch.setenv(auto.ENV, "cuda")
    with pytest.raises(kuiper.ConfigError, match="KUIPER_BACKEND='cuda': give one of auto, numpy"):
        kuiper.RuntimeGraph(ACT_ZOO)
    with pytest.raises(kuiper.BackendError, match="unknown backend 'gpu' \\(available: auto, numpy"):
        kuiper.RuntimeGraph(ACT_ZOO, backend="gpu")


def test_a_named_device_means_opencl(default, monkeypatch):
    graph = kuiper.RuntimeGraph(ACT_ZOO, device="0:0")
    assert (graph.backend, graph.device) == ("opencl", "0:0") and "'0:0' named" in graph.choice.reason
    monkeypatch.setenv("KUIPER_CL_DEVICE", "Intel")
    graph = kuiper.RuntimeGraph(ACT_ZOO)
    assert (graph.backend, graph.device) == ("opencl", None) and "'Intel' named" in graph.choice.reason


def test_fp16_is_never_the_default(default):
    assert kuiper.RuntimeGraph(ACT_ZOO).precision == "fp32"


@pytest.fixture
def broken_hardtanh(tmp_path):
    """leaky_clamp's config (serving nn.Hardtanh) with a kernel that does not compile, and its numpy reference."""
    folder = tmp_path / "leaky_clamp"
    shutil.copytree(LEAKY_CLAMP, folder)
    kernel = folder / "leaky_clamp.cl"
    kernel.write_text(kernel.read_text().replace("const float v = LOAD(x, i);", "const float v = LOAD(x, i)"))
    return folder / "leaky_clamp.toml"


@pytest.mark.parametrize("spec", OPENCL_DEVICES or [pytest.param(None, marks=pytest.mark.skip("no usable OpenCL device"))])
def test_a_model_opencl_cannot_build_runs_on_numpy(default, broken_hardtanh, spec):
    with pytest.raises(kuiper.CustomOpError, match="failed to build"):  # named, opencl fails as before
        kuiper.load(ACT_ZOO, backend="opencl", device=spec, custom_ops=[broken_hardtanh])
    graph = kuiper.load(ACT_ZOO, device=spec, custom_ops=[broken_hardtanh])
    assert (graph.backend, graph.runtime) == ("numpy", None)
    assert "opencl failed on this model" in graph.choice.reason
    outputs = graph.forward(np.load(MODELS / "act_zoo" / "b2_in0.npy"))
    expected = np.load(MODELS / "act_zoo" / "b2_out2.npy")  # PyTorch's Hardtanh, served by the config's reference
    np.testing.assert_allclose(outputs[2], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", OPENCL_DEVICES or [pytest.param(None, marks=pytest.mark.skip("no usable OpenCL device"))])
def test_the_cli_says_which_in_one_line(default, broken_hardtanh, spec, capsys):
    assert main(["run", str(ACT_ZOO), "--custom-op", str(broken_hardtanh), "--device", spec]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"backend: numpy (auto: OpenCL device '{spec}' named; opencl failed on this model: ")
    assert not any(line.startswith("backend:") for line in err[1:])
    assert main(["run", str(ACT_ZOO), "--backend", "numpy"]) == 0
    assert "backend:" not in capsys.readouterr().err  # named: nothing to say


def test_the_line_names_the_device():
    class Device:
        name, platform = "AMD EPYC ", type("Platform", (), {"name": "Intel(R) OpenCL"})

    graph = type("Graph", (), {"backend": "opencl", "runtime": type("Runtime", (), {"device": Device}),
                               "choice": auto.Choice("opencl", "0:0", "auto: why")})
    assert auto.said(graph) == "backend: opencl on AMD EPYC (Intel(R) OpenCL) (auto: why)"
