"""The claims of lesson 11: the meet_num BFS, by-reference hand-over, tracing, and one plan per input shape."""

import contextlib
import io

import numpy as np
import pytest

import kuiper
from kuiper import InputError
from lesson_tools import RESNET, check_shell_commands, model_case

SMALL_MODELS = ["pool_zoo", "expr_two_inputs", "shape_zoo", "unet_tiny", "reshape_batch"]


def check_trace(graph, events):
    """The trace is a valid run of the meet_num search over `graph`: every operator runs once, in graph.order,
    only once all its input slots were counted; after each run come the probes of exactly its successors, in
    their order, each adding the slots the operator that ran fills."""
    ops = {op.name: op for op in graph.operators}
    meet = dict.fromkeys(ops, 0)
    ready = {name for name, op in ops.items() if not op.input_operands}
    runs, pending, current = [], [], None
    for event in events:
        if event[0] == "run":
            assert not pending, f"{current.name} did not probe {pending}"
            current = ops[event[1]]
            assert current.name in ready and current.name not in runs, event
            runs.append(current.name)
            pending = [succ.name for succ in current.successors]
        else:
            _, name, count = event
            assert pending and pending.pop(0) == name, event
            meet[name] += ops[name].slots_fed_by(current)
            assert count == f"{meet[name]}/{len(ops[name].input_operands)}", event
            if meet[name] == len(ops[name].input_operands):
                ready.add(name)
    assert not pending and runs == [op.name for op in graph.order]


def traced(graph, *inputs):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        outputs = graph.forward(*inputs, trace=True)
    assert printed.getvalue().splitlines() == graph.last_trace
    events = []
    for line in graph.last_trace:
        words = line.split()
        events.append(("run", words[1]) if words[0] == "run" else ("probe", words[1], words[3]))
    return outputs, events


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_trace_is_the_bfs_of_the_text_and_outputs_match_pytorch(name):
    param, inputs, expected = model_case(name, "b2")
    graph = kuiper.load(param, backend="reference")
    outputs, events = traced(graph, *inputs)
    check_trace(graph, events)
    assert [op.name for op in graph.order] == [op.name for op in kuiper.load(param, backend="numpy").unfused_order]
    assert all(op.meet_num == len(op.input_operands) for op in graph.operators)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("name", ["resnet18", "conv_zoo"] + SMALL_MODELS)
def test_numpy_trace_is_the_bfs_of_the_fused_graph(name):
    """The same search over the operators the fusion pass left, whatever they are. The pass keeps each operand's
    readers in the file's order (a fused operator takes the place of the operators it absorbed), so they are
    read from the rewritten graph; the meet_num counting is recomputed."""
    param, inputs, expected = model_case(name, "b1" if name == "resnet18" else "b2")
    graph = kuiper.load(param, backend="numpy")
    outputs, events = traced(graph, *inputs)
    check_trace(graph, events)
    assert all(op.meet_num == len(op.input_operands) for op in graph.operators)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def test_tensors_are_handed_over_by_reference():
    """Each layer reads the very memory its producer wrote: record the data pointers layers see."""
    param, inputs, _ = model_case("unet_tiny", "b2")
    graph = kuiper.load(param, backend="numpy")
    seen = {}
    for op in graph.operators:
        if op.layer is None:
            continue

        def spy(ins, outs, op=op, forward=op.layer.forward_numpy):
            seen[op.name] = ([a.__array_interface__["data"][0] for a in ins],
                             [a.__array_interface__["data"][0] for a in outs])
            forward(ins, outs)

        op.layer.forward_numpy = spy
    graph.forward(*inputs)
    checked = 0
    for op in graph.operators:
        if op.name not in seen:
            continue
        for slot, operand in enumerate(op.input_operands):
            producer = operand.producer
            if producer.name in seen:
                k = producer.output_operands.index(operand)
                assert seen[op.name][0][slot] == seen[producer.name][1][k]
                checked += 1
            elif producer.type == "pnnx.Input":
                assert seen[op.name][0][slot] == inputs[0].__array_interface__["data"][0]
                checked += 1
    assert checked == sum(len(op.input_operands) for op in graph.operators if op.name in seen)  # every input


def test_outputs_belong_to_the_caller_and_meet_num_resets():
    param, (x,), _ = model_case("pool_zoo", "b2")
    graph = kuiper.load(param, backend="numpy")
    first = [out.copy() for out in graph.forward(x)]
    kept = graph.forward(x)
    graph.forward(-x)
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)  # a later forward did not overwrite returned arrays
    assert all(op.meet_num == len(op.input_operands) for op in graph.operators)


def test_one_build_many_batch_sizes_one_plan_each():
    graph = kuiper.load(RESNET, backend="numpy")
    assert len(graph.plans) == 1  # build() planned the shape recorded in the file, batch 1
    first = graph.plan_for((1, 3, 224, 224))
    _, (x,), (want,) = model_case("resnet18", "b3")  # (batch 1 itself is lesson 1's checkpoint)
    (got,) = graph.forward(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(graph.plans) == 2
    assert graph.plan_for((1, 3, 224, 224)) is first  # cached per shape, not rebuilt
    assert graph.plan_for((3, 3, 224, 224)).shapes[graph.output_operands[0].name] == (3, 1000)
    assert sorted(key[0][0][0] for key in graph.plans) == [1, 3]
    with pytest.raises(InputError, match=r"expected \(1,3,224,224\), given \(1,4,224,224\)"):
        graph.forward(np.zeros((1, 4, 224, 224), np.float32))


def test_resnet_trace_shows_the_skip_connection_waiting(capsys):
    outputs = check_shell_commands(11, capsys)
    lines = outputs["kuiper run --backend reference --trace"].splitlines()
    probes = [line.split()[-1] for line in lines if "probe pnnx_expr_14" in line]
    assert probes == ["1/2", "2/2"]
    runs = [line.split()[1] for line in lines if line.startswith("run ")]
    assert runs == [op.name for op in kuiper.load(RESNET, backend="reference").order]
    # on numpy the add is part of convbn2d_2, which now waits for the skip connection
    fused = outputs["kuiper run --backend numpy --trace"].splitlines()
    assert [line.split()[-1] for line in fused if "probe convbn2d_2 " in line] == ["1/2", "2/2"]
    assert not any("pnnx_expr_14" in line for line in fused)
    for text in outputs.values():
        assert "matches the saved PyTorch output" in text
