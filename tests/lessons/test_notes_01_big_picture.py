"""The claims of lesson 1: ResNet-18 runs and agrees with PyTorch; the models and the export tool are
what the notes say they are; the notes' commands work."""

import ast
from collections import Counter

import numpy as np

import kuiper
from lesson_tools import MODELS, RESNET, ROOT, check_shell_commands, manifest, model_case


def test_resnet18_forward_matches_the_saved_pytorch_output():
    param, (x,), (expected,) = model_case("resnet18", "b1")
    graph = kuiper.load(param, backend="numpy")
    (logits,) = graph.forward(x)
    assert logits.shape == expected.shape == (1, 1000)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    # the same five classes, in the same order, as PyTorch
    assert list(np.argsort(logits[0])[::-1][:5]) == list(np.argsort(expected[0])[::-1][:5])


def test_the_reference_backend_runs_the_files_graph_and_agrees():
    param, (x,), (expected,) = model_case("resnet18", "b1")
    reference = kuiper.load(param, backend="reference")
    assert len(reference.operators) == len(kuiper.pnnx.load(param).operators) == 51
    assert len(kuiper.load(param, backend="numpy").operators) == 26  # 17 ReLUs and 8 adds ride along with convolutions
    np.testing.assert_allclose(reference.forward(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_every_model_in_the_manifest_is_on_disk_with_its_cases():
    entries = manifest()["models"]
    assert "resnet18" in entries and len(entries) >= 2
    for name, entry in entries.items():
        assert (MODELS / entry["param"]).is_file(), name
        assert (MODELS / entry["bin"]).is_file(), name
        assert entry["cases"], name
        for case in entry["cases"]:
            for path in case["inputs"] + case["outputs"]:
                assert (MODELS / path).is_file(), path
        # the operator types the manifest lists are the ones in the file (first token of each line)
        lines = (MODELS / entry["param"]).read_text().splitlines()[2:]
        assert sorted({line.split()[0] for line in lines if line.strip()}) == entry["operator_types"]


def test_the_export_tool_goes_through_pnnx_export():
    """tools/export_models.py exports through kuiper/app/export.py's run_pnnx (shared with `kuiper export`), whose
    one call of pnnx.export passes the model, the path of the traced .pt and the example inputs."""
    tool = ast.parse((ROOT / "tools" / "export_models.py").read_text())
    assert any(isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_pnnx" for node in ast.walk(tool))
    tree = ast.parse((ROOT / "kuiper" / "app" / "export.py").read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "export"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "pnnx"]
    assert len(calls) == 1
    assert len(calls[0].args) == 3  # model, path of the traced .pt, example inputs
    assert manifest()["generator"] == "tools/export_models.py"


def test_pnnx_folded_batchnorm_into_the_convolutions():
    types = Counter(op.type for op in kuiper.pnnx.load(RESNET).operators)
    assert types["nn.Conv2d"] == 20
    assert not any("BatchNorm" in t for t in types)
    assert types["pnnx.Expression"] == 8  # the eight skip-connection additions


def test_the_commands_in_the_notes(capsys):
    outputs = check_shell_commands(1, capsys)
    assert "matches the saved PyTorch output" in outputs["kuiper run"]
    assert "input 3x3x224x224" in outputs["kuiper run --batch 3"]
    assert "matches the saved PyTorch output" in outputs["kuiper run --batch 3"]
    assert "matches the saved PyTorch output" in outputs["kuiper run models/pool_zoo/pool_zoo.pnnx.param"]
