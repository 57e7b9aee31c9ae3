"""Checkpoint of lesson 10: build's order, shape inference, liveness memory plan and build-time errors."""

import numpy as np
import pytest

import kuiper
from kuiper import GraphError, GraphState, ShapeError, UnsupportedOperatorError
from kuiper.runtime.planner import Lifetime, assign_buffers
from lesson_tools import MODELS, check_shell_commands, manifest, param_lines, BLOCK, MODEL_PARAMS



@pytest.fixture(scope="module", params=MODEL_PARAMS, ids=lambda p: p.parent.name)
def built(request):
    return kuiper.load(request.param)


def test_order_runs_every_operator_after_its_producers(built):
    position = {op.name: k for k, op in enumerate(built.order)}
    assert sorted(position) == sorted(op.name for op in built.operators)
    for op in built.order:
        for operand in op.input_operands:
            assert position[operand.producer.name] < position[op.name]


def test_no_two_live_operands_share_a_buffer(built):
    plan = next(iter(built.plans.values()))  # the plan for the recorded input shapes
    position = {op.name: k for k, op in enumerate(built.order)}
    life = {}
    for name in plan.tensors:  # a buffer lives from its producer to the last reader of any name it goes by
        operand, owner = built.operands[name], name
        while owner in built.in_place:  # an in-place operator's output is its input's buffer
            owner = built.in_place[owner]
        first = position[operand.producer.name]
        last = max((position[c.name] for c in operand.consumers), default=first)
        start, end = life.get(owner, (first, last))
        life[owner] = (min(start, first), max(end, last))
    by_slot = {}
    for name, slot in plan.assignment.slot_of.items():
        by_slot.setdefault(slot, []).append(name)
        # each pooled tensor is a view that fits inside its slot
        assert plan.tensors[name].nbytes <= plan.assignment.slot_sizes[slot]
    for names in by_slot.values():
        spans = sorted(life[n] for n in names)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end < start, f"lifetimes overlap in one buffer: {spans}"
    assert plan.pooled_bytes <= plan.unpooled_bytes()


def test_inferred_shapes_equal_the_shapes_pytorch_recorded(built):
    plan = next(iter(built.plans.values()))
    for name, operand in built.operands.items():
        if operand.shape is not None and all(isinstance(d, int) for d in operand.shape):
            assert plan.shapes[name] == operand.shape


def test_shapes_at_another_batch_size_scale_the_batch_only():
    resnet = kuiper.load(MODELS / "resnet18" / "resnet18.pnnx.param")
    plan1, plan8 = resnet.plan_for((1, 3, 224, 224)), resnet.plan_for((8, 3, 224, 224))
    for name, shape in plan1.shapes.items():
        assert plan8.shapes[name] == (8 * shape[0],) + shape[1:]
    assert len(plan1.assignment.slot_sizes) == 3
    assert plan8.pooled_bytes == 8 * plan1.pooled_bytes
    assert len(resnet.plans) == 2


def execute(steps, slot_of, x):
    slots = {}
    for name, reads, function in steps:
        value = x if function is None else function(*[slots[slot_of[r]] for r in reads])
        slots[slot_of[name]] = value
    return slots[slot_of[steps[-1][0]]]


def test_reuse_by_size_breaks_a_skip_connection_and_liveness_does_not():
    steps = [("t3", [], None), ("t4", ["t3"], lambda v: 2 * v), ("t5", ["t4"], lambda v: np.maximum(v, 0)),
             ("t6", ["t5"], lambda v: v - 1), ("t7", ["t6", "t3"], lambda a, b: a + b)]
    x = np.array([-1.0, 2.0, -3.0])
    truth = execute(steps, {name: k for k, (name, _, _) in enumerate(steps)}, x)
    np.testing.assert_array_equal(truth, (np.maximum(2 * x, 0) - 1) + x)

    # reuse by size: t5 lands in t3's buffer although the add still needs t3
    by_size = {"t3": 0, "t4": 1, "t5": 0, "t6": 1, "t7": 2}
    assert not np.array_equal(execute(steps, by_size, x), truth)

    lifetimes = [Lifetime("t3", 24, 0, 4), Lifetime("t4", 24, 1, 2), Lifetime("t5", 24, 2, 3),
                 Lifetime("t6", 24, 3, 4), Lifetime("t7", 24, 4, 4)]
    planned = assign_buffers(lifetimes)
    assert len(planned.slot_sizes) == 3
    assert planned.slot_of["t5"] != planned.slot_of["t3"]
    np.testing.assert_array_equal(execute(steps, planned.slot_of, x), truth)


def test_planner_never_overlaps_on_random_lifetimes():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lifetimes = []
        for k in range(12):
            first = int(rng.integers(0, 10))
            lifetimes.append(Lifetime(k, int(rng.integers(1, 100)), first, first + int(rng.integers(0, 5))))
        planned = assign_buffers(lifetimes)
        for a in lifetimes:
            assert planned.slot_sizes[planned.slot_of[a.key]] >= a.size
            for b in lifetimes:
                if a.key < b.key and planned.slot_of[a.key] == planned.slot_of[b.key]:
                    assert a.last < b.first or b.last < a.first


def test_build_time_errors(tmp_path):
    todo = tmp_path / "todo.pnnx.param"
    todo.write_text(BLOCK.replace("nn.ReLU ", "nn.Mish ").replace("nn.Sigmoid", "nn.Softsign"))
    with pytest.raises(UnsupportedOperatorError, match=r"'nn\.Mish' \(operator relu\); 'nn\.Softsign'"):
        kuiper.load(todo)

    bad = tmp_path / "bad.pnnx.param"
    bad.write_text(BLOCK.replace("#a=(1,2,3,3)", "#a=(1,2,3,4)"))
    with pytest.raises(ShapeError, match=r"bad\.pnnx\.param:4: .*'relu' infers shape \(1, 2, 3, 3\)"):
        kuiper.load(bad)

    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    cyclic = kuiper.RuntimeGraph(path).init()
    scale, c = cyclic.operators[2], cyclic.operands["c"]
    scale.input_operands.append(c)
    c.consumers.append(scale)
    with pytest.raises(GraphError, match=r"4 operator\(s\) can never run.*'scale'.*'add'"):
        cyclic.build()
    assert cyclic.state == GraphState.NEED_BUILD


def test_order_is_the_fifo_breadth_first_order_of_the_text():
    """The dry run is Kahn's algorithm with a FIFO queue; recompute it from the .param tokens alone."""
    from collections import deque

    for param in MODEL_PARAMS:
        lines = param_lines(param)
        inputs = {t[1]: t[4:4 + int(t[2])] for t in lines}
        consumers = {}
        for t in lines:
            for operand in inputs[t[1]]:
                consumers.setdefault(operand, []).append(t[1])
        ready = {t[1]: 0 for t in lines}
        queue = deque(t[1] for t in lines if not inputs[t[1]])
        order = []
        while queue:
            name = queue.popleft()
            order.append(name)
            line = next(t for t in lines if t[1] == name)
            for operand in line[4 + int(line[2]):4 + int(line[2]) + int(line[3])]:
                for succ in consumers.get(operand, []):
                    ready[succ] += 1
                    if ready[succ] == len(inputs[succ]):
                        queue.append(succ)
        assert [op.name for op in kuiper.load(param).order] == order, param.name


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(10, capsys)
