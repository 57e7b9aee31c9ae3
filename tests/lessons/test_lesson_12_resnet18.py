"""Checkpoint of lesson 12: ResNet-18 against PyTorch, the profile's coverage, inspect's numbers. No timing
is asserted."""

import re
from collections import Counter

import numpy as np
import pytest

import kuiper
from kuiper import inspection
from lesson_tools import RESNET, check_shell_commands, model_case, param_lines


@pytest.fixture(scope="module")
def resnet():
    return kuiper.load(RESNET)


def close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))


@pytest.mark.parametrize("case", ["b1", "b8"])
def test_matches_pytorch_within_the_tolerances(resnet, case):
    _, (x,), (want,) = model_case("resnet18", case)
    (got,) = resnet.forward(x)
    assert close(got, want)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
    np.testing.assert_array_equal(np.argmax(got, axis=1), np.argmax(want, axis=1))


def test_the_tolerance_catches_a_layout_bug(resnet):
    _, (x,), (want,) = model_case("resnet18", "b1")
    (wrong,) = resnet.forward(np.ascontiguousarray(x.transpose(0, 1, 3, 2)))
    assert not close(wrong, want)


def test_profile_covers_every_layer_once_in_execution_order(resnet):
    _, (x,), _ = model_case("resnet18", "b1")
    resnet.forward(x, profile=True)
    profiled = [entry[0] for entry in resnet.last_profile]
    assert [op.name for op in profiled] == [op.name for op in resnet.order if op.layer is not None]
    assert all(entry[1] >= 0 and entry[2] is None for entry in resnet.last_profile)
    by_type = inspection.profile_by_type(resnet.last_profile)
    types = Counter(t[0] for t in param_lines(RESNET) if t[0] not in ("pnnx.Input", "pnnx.Output"))
    assert {kind: entry[0] for kind, entry in by_type.items()} == dict(types)
    total = sum(entry[1] for entry in by_type.values())
    assert total == pytest.approx(sum(entry[1] for entry in resnet.last_profile))


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


def test_multiply_accumulates_from_shapes(resnet):
    plan = resnet.plan_for((1, 3, 224, 224))
    work = {op.name: expected_macs(op, plan.shapes) for op in resnet.operators}
    conv = sum(v for name, v in work.items() if name.startswith("convbn2d"))
    assert 1.81e9 < conv < 1.82e9 and conv / sum(work.values()) > 0.999
    # every count a layer reports (Layer.macs, shown by `kuiper inspect`) agrees with the formula
    reported = {row.name: row.macs for row in inspection.operator_rows(resnet, plan)}
    assert reported["fc"] == work["fc"] == 512_000
    for name, macs in reported.items():
        if macs:
            assert macs == work[name], name


def test_activation_memory_of_the_liveness_plan(resnet):
    for batch in (1, 8):
        plan = resnet.plan_for((batch, 3, 224, 224))
        memory = inspection.activation_memory(resnet, plan)
        assert memory["buffers"] == 3
        assert memory["planned"] == plan.pooled_bytes + batch * 1000 * 4  # plus the (N, 1000) output
        assert memory["unplanned"] > 3 * memory["planned"]


def test_the_commands_in_the_notes(capsys, resnet):
    outputs = check_shell_commands(12, capsys)
    profile = outputs["kuiper run --profile"]
    assert "time per type" in profile and "matches the saved PyTorch output" in profile
    assert re.search(r"nn\.Conv2d\W+20\W", profile)  # the per-type table: 20 convolutions
    for command, batch in (("kuiper inspect", 1), ("kuiper inspect --input-shape 8,3,224,224", 8)):
        text = outputs[command]
        assert "parameters: 11,684,712" in text
        planned = inspection.activation_memory(resnet, resnet.plan_for((batch, 3, 224, 224)))["planned"]
        assert re.search(rf"{planned / 2**20:.2f} MiB planned in 3 shared buffers", text), text[-400:]
