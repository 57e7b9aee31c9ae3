"""The claims of lesson 12: ResNet-18 against PyTorch, the profile's coverage, inspect's numbers. No timing
is asserted."""

import re
from collections import Counter

import numpy as np
import pytest

import kuiper
from kuiper.app import inspection
from lesson_tools import RESNET, check_shell_commands, model_case, param_lines


@pytest.fixture(scope="module")
def resnet():
    return kuiper.load(RESNET, backend="numpy")


@pytest.fixture(scope="module")
def file_graph():
    """The file's graph, with the reference layers."""
    return kuiper.load(RESNET, backend="reference")


def close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))


@pytest.mark.parametrize("case", ["b1", "b8"])
def test_matches_pytorch_within_the_tolerances(resnet, file_graph, case):
    _, (x,), (want,) = model_case("resnet18", case)
    for graph in (resnet, file_graph):
        (got,) = graph.forward(x)
        assert close(got, want)
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
        np.testing.assert_array_equal(np.argmax(got, axis=1), np.argmax(want, axis=1))


def test_the_tolerance_catches_a_layout_bug(resnet):
    _, (x,), (want,) = model_case("resnet18", "b1")
    (wrong,) = resnet.forward(np.ascontiguousarray(x.transpose(0, 1, 3, 2)))
    assert not close(wrong, want)


def test_profile_covers_every_layer_once_in_execution_order(resnet, file_graph):
    _, (x,), _ = model_case("resnet18", "b1")
    types = Counter(t[0] for t in param_lines(RESNET) if t[0] not in ("pnnx.Input", "pnnx.Output"))
    for graph in (file_graph, resnet):
        graph.forward(x, profile=True)
        profiled = [entry[0] for entry in graph.last_profile]
        assert [op.name for op in profiled] == [op.name for op in graph.order if op.layer is not None]
        assert all(entry[1] >= 0 and entry[2] is None for entry in graph.last_profile)
        by_type = inspection.profile_by_type(graph.last_profile)
        # a fused operator's type names every type it does: taken apart, they are the file's operators
        parts = Counter()
        for kind, entry in by_type.items():
            for part in kind.split("+"):
                parts[part] += entry[0]
        assert parts == types
        total = sum(entry[1] for entry in by_type.values())
        assert total == pytest.approx(sum(entry[1] for entry in graph.last_profile))
    assert len(file_graph.last_profile) == 49 and len(resnet.last_profile) == 24
    assert {kind: entry[0] for kind, entry in inspection.profile_by_type(file_graph.last_profile).items()} == dict(types)


def test_every_convolution_ran_a_variant(resnet):
    _, (x,), _ = model_case("resnet18", "b1")
    resnet.forward(x)
    convolutions = [op.name for op in resnet.order if op.type.startswith("nn.Conv2d")]
    assert sorted(resnet.last_variants) == sorted(convolutions) and len(convolutions) == 20
    assert Counter(resnet.last_variants.values()) == {"im2col": 10, "winograd_f4": 7, "winograd_f2": 3}


def test_parameter_count_from_the_param_text_alone(resnet):
    count = 0
    for tokens in param_lines(RESNET):
        for token in tokens:
            if token.startswith("@"):
                shape = token.split("=(", 1)[1].split(")")[0]
                count += int(np.prod([int(d) for d in shape.split(",")]))
    assert count == 11_684_712
    rows = inspection.operator_rows(resnet, resnet.plan_for((1, 3, 224, 224)))
    assert sum(row.params for row in rows) == count


def expected_macs(op, shapes):
    if op.type == "nn.Conv2d":
        n, cout, ho, wo = shapes[op.output_operand.name]
        kh, kw = op.params["kernel_size"].value
        return n * cout * ho * wo * (op.params["in_channels"].value // op.params["groups"].value) * kh * kw
    if op.type == "nn.Linear":
        return int(np.prod(shapes[op.output_operand.name])) * op.params["in_features"].value
    return 0


def test_multiply_accumulates_from_shapes(resnet, file_graph):
    shapes = file_graph.plan_for((1, 3, 224, 224)).shapes
    work = {op.name: expected_macs(op, shapes) for op in file_graph.operators}
    conv = sum(v for name, v in work.items() if name.startswith("convbn2d"))
    assert 1.81e9 < conv < 1.82e9 and conv / sum(work.values()) > 0.999
    # every count a layer reports (Layer.macs, shown by `kuiper inspect`) agrees with the formula; a fused
    # operator keeps its convolution's name and reports its convolution's count
    for graph in (file_graph, resnet):
        reported = {row.name: row.macs for row in inspection.operator_rows(graph, graph.plan_for((1, 3, 224, 224)))}
        assert reported["fc"] == work["fc"] == 512_000
        assert sum(reported.values()) == sum(work.values())
        for name, macs in reported.items():
            assert macs == work[name], name


def test_activation_memory_of_the_liveness_plan(resnet, file_graph):
    for graph in (resnet, file_graph):
        for batch in (1, 8):
            plan = graph.plan_for((batch, 3, 224, 224))
            memory = inspection.activation_memory(graph, plan)
            assert memory["buffers"] == 3
            assert memory["planned"] == plan.pooled_bytes + batch * 1000 * 4  # plus the (N, 1000) output
            # one buffer per tensor: every tensor a layer writes, counted from the shapes
            written = sum(int(np.prod(plan.shapes[o.name])) * 4
                          for op in graph.order if op.layer is not None for o in op.output_operands)
            assert memory["unplanned"] == written
    mib = [round(inspection.activation_memory(g, g.plan_for((1, 3, 224, 224)))[key] / 2**20, 2)
           for g in (resnet, file_graph) for key in ("planned", "unplanned")]
    assert mib == [4.6, 10.25, 6.89, 21.92]  # the notes' numbers


def test_the_commands_in_the_notes(capsys, resnet):
    outputs = check_shell_commands(12, capsys)
    reference = outputs["kuiper run --backend reference --profile"]
    profile = outputs["kuiper run --backend numpy --profile"]
    for text in (reference, profile):
        assert "time per type" in text and "matches the saved PyTorch output" in text
    assert re.search(r"nn\.Conv2d\W+20\W", reference)  # the per-type table: 20 convolutions, 17 ReLUs
    assert re.search(r"nn\.ReLU\W+17\W", reference)
    assert re.search(r"nn\.Conv2d\+nn\.ReLU\W+9\W", profile)  # 9 fused with their ReLU, 3 shortcuts alone
    assert re.search(r"nn\.Conv2d\W+3\W", profile)
    assert "variant" in profile and "winograd_f4" in profile and "winograd_f2" in profile and "im2col" in profile
    for command, batch in (("kuiper inspect", 1), ("kuiper inspect --input-shape 8,3,224,224", 8)):
        text = outputs[command]
        assert "parameters: 11,684,712" in text
        planned = inspection.activation_memory(resnet, resnet.plan_for((batch, 3, 224, 224)))["planned"]
        assert re.search(rf"{planned / 2**20:.2f} MiB planned in 3 shared buffers", text), text[-400:]
