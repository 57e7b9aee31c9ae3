"""The claims of lesson 18: an operator from a kernel and a config, on both backends; the automatic
defines the notes list; an override that stays in its graph; a model with a module pnnx kept whole."""

import re

import numpy as np
import pytest

import kuiper
from kuiper.custom import CustomLayer, read_config
from kuiper.layers.hardtanh import Hardtanh
from kuiper.layers.registry import layer_class
from kuiper.core.operators import make_operator
from conftest import NO_OPENCL, OPENCL_DEVICES
from lesson_tools import ROOT, check_shell_commands, model_case, notes_text

EXAMPLES = ROOT / "examples" / "custom_ops"

SOFTSIGN_KERNEL = """__kernel void softsign(__global float* y, __global const float* x) {
    const int i = get_global_id(0);
    if (i < OUTPUT0_SIZE) y[i] = x[i] / (1.0f + fabs(x[i]));
}
"""
SOFTSIGN_CONFIG = """type = "nn.Softsign"
reference = "reference.py:softsign"
args = [{ index = 0, output = 0 }, { index = 1, input = 0 }]

[kernel]
file = "softsign.cl"
entry = "softsign"

[worksize]
global = ["(N*C*H*W + 63) / 64 * 64"]
"""
SOFTSIGN_REFERENCE = """import numpy as np

def softsign(inputs, weights, params):
    return inputs[0] / (1 + np.abs(inputs[0]))
"""
GRAPH = """7767517
3 2
pnnx.Input   in0   0 1 x #x=(2,3,4,5)f32
nn.Softsign  soft  1 1 x y #x=(2,3,4,5)f32 #y=(2,3,4,5)f32
pnnx.Output  out0  1 0 y
"""


@pytest.fixture(params=["numpy", "opencl"])
def backend(request):
    if request.param == "opencl" and not OPENCL_DEVICES:
        pytest.skip(NO_OPENCL)
    return request.param


@pytest.fixture
def softsign(tmp_path):
    for name, text in (("softsign.cl", SOFTSIGN_KERNEL), ("softsign.toml", SOFTSIGN_CONFIG),
                       ("reference.py", SOFTSIGN_REFERENCE), ("soft.pnnx.param", GRAPH)):
        (tmp_path / name).write_text(text)
    return tmp_path


def test_softsign_from_a_kernel_and_a_config(softsign, backend):
    graph = kuiper.load(softsign / "soft.pnnx.param", backend=backend, custom_ops=[softsign / "softsign.toml"])
    assert isinstance(graph.operators[1].layer, CustomLayer)
    for shape in ((2, 3, 4, 5), (1, 3, 9, 2)):  # shapes the work-size rounding does not divide evenly
        x = np.random.default_rng(17).standard_normal(shape).astype(np.float32) * 5
        (y,) = graph.forward(x)
        np.testing.assert_allclose(y, x / (1 + np.abs(x)), rtol=1e-6)


def per_tensor(name: str) -> str:
    """INPUT1_SIZE and OUTPUT0_SIZE are both INPUTk_SIZE: the notes list the per-tensor names once."""
    return re.sub(r"^(INPUT(\d+|k)|OUTPUT0)_", "INPUTk_", name)


def documented_defines() -> set:
    """The automatic define names in the notes' table (first column), without the parameter row."""
    table = notes_text(18).split("| define | value |", 1)[1].split("\n\n", 1)[0]
    names = set()
    for row in table.splitlines()[2:]:
        first = row.split("|")[1]
        if "parameter" not in first:
            names.update(per_tensor(name) for name in re.findall(r"`([A-Z][A-Z0-9_]*k?[A-Z0-9_]*)`", first))
    return names


def test_the_notes_list_every_automatic_define_and_no_other(softsign):
    config = softsign / "softsign.toml"
    config.write_text(SOFTSIGN_CONFIG.replace('global = ["(N*C*H*W + 63) / 64 * 64"]',
                                              'global = ["N*C*H*W"]\nlocal = ["1"]'))
    op = make_operator("nn.Softsign", input_shapes=((2, 3), (4, 5, 6)))
    options = CustomLayer(op, read_config(config)).build_options([(2, 3), (4, 5, 6)])
    generated = {per_tensor(o[2:].split("=")[0]) for o in options}
    assert generated == documented_defines()
    assert "-DINPUT1_DIMS={4,5,6,1}" in options and "-DINPUT1_PITCHES={30,6,1,1}" in options


def test_leaky_clamp_overrides_hardtanh_in_its_graph_only():
    param, inputs, references = model_case("act_zoo", "b2")
    graph = kuiper.load(param, custom_ops=[EXAMPLES / "leaky_clamp"], backend="numpy")
    (op,) = [op for op in graph.operators if op.type == "nn.Hardtanh"]
    assert isinstance(op.layer, CustomLayer) and op.layer.param_options == ["-DLO=(-0.5f)", "-DHI=0.75f"]
    hardtanh = graph.forward(*inputs)[2]
    np.testing.assert_allclose(hardtanh, references[2], rtol=1e-4, atol=1e-4)
    assert layer_class("nn.Hardtanh") is Hardtanh
    # a graph loaded without the config gets the built-in layer: the registered class itself on the reference
    # backend, its fast subclass (kuiper/cpu/, lesson 13) on numpy
    (plain,) = [op for op in kuiper.load(param, backend="reference").operators if op.type == "nn.Hardtanh"]
    assert type(plain.layer) is Hardtanh
    (fast,) = [op for op in kuiper.load(param, backend="numpy").operators if op.type == "nn.Hardtanh"]
    assert isinstance(fast.layer, Hardtanh) and not isinstance(fast.layer, CustomLayer)


def test_the_leaky_part_of_the_kernel_matches_the_reference(cl_runtime):
    op = make_operator("nn.Hardtanh", params={"min_val": -1.0, "max_val": 1.0, "slope": 0.25}, input_shapes=((3, 8),))
    layer = CustomLayer(op, read_config(EXAMPLES / "leaky_clamp" / "leaky_clamp.toml"))
    x = np.linspace(-3, 2.75, 24, dtype=np.float32).reshape(3, 8)
    (y,) = layer.run_opencl(cl_runtime, x)
    clamped = np.clip(x, -1, 1)
    np.testing.assert_allclose(y, clamped + 0.25 * (x - clamped), rtol=1e-6)


@pytest.mark.parametrize("case", ["b2", "b1_4x6"])
def test_custom_scale_matches_pytorch(backend, case):
    param = ROOT / "models" / "custom_scale" / "custom_scale.pnnx.param"
    graph = kuiper.load(param, backend=backend, custom_ops=[EXAMPLES])
    inputs = [np.load(param.parent / f"{case}_in0.npy")]
    for k, y in enumerate(graph.forward(*inputs)):
        reference = np.load(param.parent / f"{case}_out{k}.npy")
        np.testing.assert_allclose(y, reference, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(reference).max())))


def test_the_commands_in_the_notes(capsys):
    if not OPENCL_DEVICES:  # the lesson's commands run its operators on OpenCL
        pytest.skip(NO_OPENCL)
    outputs = check_shell_commands(18, capsys)
    for command, out in outputs.items():
        if command.startswith("kuiper run"):
            assert "matches the saved PyTorch output" in out, command
    inspect = outputs["kuiper inspect models/custom_scale/custom_scale.pnnx.param --custom-op examples/custom_ops"]
    assert "channel_scale (ChannelScale) <- examples/custom_ops/channel_scale/channel_scale.toml" in inspect
