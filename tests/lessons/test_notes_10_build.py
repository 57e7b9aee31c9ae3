"""The claims of lesson 10: build's order, the fusion pass, shape inference, liveness memory plan and build-time
errors, on both CPU backends."""

import numpy as np
import pytest

import kuiper
from kuiper import GraphError, GraphState, ShapeError, UnsupportedOperatorError
from kuiper.app import inspection
from kuiper.cpu.registry import fast_class
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.expression import Expression
from kuiper.layers.copy_chain import CopyChain
from kuiper.layers.permute import Permute
from kuiper.layers.reshape import ViewLayer
from kuiper.layers.split import SplitLayer
from kuiper.layers.transpose import Transpose
from kuiper.runtime.planner import Lifetime, assign_buffers
from lesson_tools import MODELS, RESNET, check_shell_commands, manifest, model_case, BLOCK, MODEL_PARAMS

BACKENDS = ("numpy", "reference")


@pytest.fixture(scope="module", params=[(p, b) for p in MODEL_PARAMS for b in BACKENDS],
                ids=lambda pb: f"{pb[0].parent.name}-{pb[1]}")
def built(request):
    param, backend = request.param
    return kuiper.load(param, backend=backend)


def buffer_owner(operand):
    """The operand whose buffer `operand` lives in: itself, or the end of its chain of `overwrites`."""
    while operand.overwrites is not None:
        operand = operand.overwrites
    return operand


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
        operand = built.operands[name]
        owner = buffer_owner(operand).name  # an in-place operator's output is its input's buffer
        if owner != name:
            assert np.shares_memory(plan.tensors[name].data, plan.tensors[owner].data)
            assert plan.aliases[name] == operand.overwrites.name
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
    for backend, slots in (("numpy", [3211264, 802816, 802816]), ("reference", [3211264, 3211264, 802816])):
        resnet = kuiper.load(RESNET, backend=backend)
        plan1, plan8 = resnet.plan_for((1, 3, 224, 224)), resnet.plan_for((8, 3, 224, 224))
        for name, shape in plan1.shapes.items():
            assert plan8.shapes[name] == (8 * shape[0],) + shape[1:]
        assert plan1.assignment.slot_sizes == slots  # the numbers of the notes
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
        kuiper.load(todo, backend="numpy")

    bad = tmp_path / "bad.pnnx.param"
    bad.write_text(BLOCK.replace("#a=(1,2,3,3)", "#a=(1,2,3,4)"))
    with pytest.raises(ShapeError, match=r"bad\.pnnx\.param:4: .*'relu' infers shape \(1, 2, 3, 3\)"):
        kuiper.load(bad, backend="numpy")

    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    cyclic = kuiper.RuntimeGraph(path, backend="numpy").init()
    scale, c = cyclic.operators[2], cyclic.operands["c"]
    scale.input_operands.append(c)
    c.consumers.append(scale)
    with pytest.raises(GraphError, match=r"4 operator\(s\) can never run.*'scale'.*'add'"):
        cyclic.build()
    assert cyclic.state == GraphState.NEED_BUILD


def test_both_backends_run_the_files_operators_in_one_order():
    """The numpy backend's order before the passes is the reference backend's (lesson 11's checkpoint holds that
    order to a breadth-first search over the text); after them, every operator of the file runs, alone or in a
    group, and the groups keep that order."""
    for param in MODEL_PARAMS:
        reference, fast = kuiper.load(param, backend="reference"), kuiper.load(param, backend="numpy")
        order = [op.name for op in reference.order]
        assert order == [op.name for op in fast.unfused_order], param.name
        assert sorted(order) == sorted(op.name for op in reference.operators), param.name
        done = {op.name for group in fast.order for op in group.absorbed or [group]}
        assert done == set(order), param.name  # every operator of the file, alone or in a group
        if not any(isinstance(op.layer, CopyChain) for op in fast.order):  # (a chunk becomes one per piece)
            absorbed = {op.name for fused in fast.order for op in fused.absorbed[1:]}
            assert [op.name for op in fast.order] == [name for name in order if name not in absorbed], param.name


def expected_chains(graph, ends: set) -> dict:
    """{name of the operator doing a chain: [the file's operators it does]}, by the copies pass's rule, worked out
    over the reference graph: from a moving operator (permute, transpose, a reshape, a split), on through every
    tensor that has one reader, a moving one, and is no graph input or output; kept where two operators or more
    and not reshapes alone; a split's pieces each a chain, named `split[i]`."""
    def moving(op):
        return isinstance(op.layer, (Permute, Transpose, ViewLayer, SplitLayer)) and len(op.input_operands) == 1

    chains, taken = {}, set()
    for op in graph.order:
        if op.name in taken or not moving(op):
            continue
        pieces = []
        for operand in op.output_operands:
            piece = [op]
            while (operand.name not in ends and len(operand.consumers) == 1 and moving(operand.consumers[0])
                   and len(operand.consumers[0].output_operands) == 1):
                piece.append(operand.consumers[0])
                operand = piece[-1].output_operand
            pieces.append(piece)
        if any(len(p) > 1 and not all(isinstance(o.layer, ViewLayer) for o in p) for p in pieces):
            split = isinstance(op.layer, SplitLayer)
            for i, piece in enumerate(pieces):
                chains[f"{op.name}[{i}]" if split else op.name] = [o.name for o in piece]
                taken.update(o.name for o in piece)
    return chains


def expected_fusion(param):
    """({main operator: [the file's operators it does]}, {operator: the operand it overwrites}) from the rules of
    the lesson, worked out over the reference graph, the copy chains first (expected_chains), then: a cheap operator (an in-place activation, or a sum whose
    output has the recorded shape of the input) whose input has it as its one reader joins the operator that now
    produces that input, if that operator's fast layer applies epilogues; else it works in place. A reshape whose
    input has it as its one reader works in place too."""
    graph = kuiper.load(param, backend="reference")
    ends = {o.name for o in graph.output_operands} | {op.output_operand.name for op in graph.input_operators}
    chains = expected_chains(graph, ends)
    moved = {name for names in chains.values() for name in names}
    head = {}  # operand name -> the main operator whose fused group produces it now
    fused, in_place = dict(chains), {}
    for op in graph.order:
        layer = op.layer
        if layer is None or len(op.output_operands) != 1 or op.output_operand.name in ends or op.name in moved:
            continue
        # whether an activation works in place is the numpy backend's layer's say (kuiper/cpu/activations.py)
        overwrites = isinstance(layer, ElementwiseLayer) and (fast_class(op.type) or type(layer)).in_place
        if isinstance(layer, ViewLayer):  # a reshape only renames its input's buffer: it never joins a group
            (source,) = op.input_operands
            if source.consumers == [op] and source.name not in ends:
                in_place[op.name] = source.name
            continue
        if overwrites and len(op.input_operands) == 1:
            sources = op.input_operands
        elif isinstance(layer, Expression) and layer.adds_two_inputs:
            sources = [s for s in op.input_operands if s.shape is not None and s.shape == op.output_operand.shape]
        else:
            continue
        for source in sources:
            if source.consumers != [op] or source.name in ends:
                continue
            main = head.get(source.name, source.producer)  # a group already fused goes on growing
            if main.name in fused or (len(main.output_operands) == 1
                                      and hasattr(fast_class(main.type) or object, "forward_epilogue")):
                fused.setdefault(main.name, [main.name]).append(op.name)
                head[op.output_operand.name] = main
            else:
                in_place[op.name] = source.name
            break
    return fused, in_place


FIRST_CASE = {name: entry["cases"][0]["name"] for name, entry in manifest()["models"].items()}


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_the_fusion_pass_does_what_its_rules_allow_and_computes_the_same(param):
    graph = kuiper.load(param, backend="numpy")
    fused, in_place = inspection.fusion_summary(graph)
    want_fused, want_in_place = expected_fusion(param)
    assert {op.name: [a.name for a in op.absorbed] for op in fused} == want_fused
    assert {op.name: op.output_operand.overwrites.name for op in in_place} == want_in_place
    for op in fused:
        assert op.type == "+".join(a.type for a in op.absorbed)
    # the rewritten graph computes what the file's graph computes
    _, inputs, _ = model_case(param.parent.name, FIRST_CASE[param.parent.name])
    reference = kuiper.load(param, backend="reference")
    for got, want in zip(graph.forward(*inputs), reference.forward(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))


def test_resnet_fuses_every_relu_and_add_and_conv_zoo_works_in_place():
    fused, in_place = expected_fusion(RESNET)
    assert len(fused) == 17 and sum(len(names) - 1 for names in fused.values()) == 17 + 8
    assert in_place == {"torch.flatten_0": "47"}  # the pooled (1, 512, 1, 1) read as (1, 512)
    assert fused["convbn2d_2"] == ["convbn2d_2", "pnnx_expr_14", "pnnx_unique_0"]
    zoo = kuiper.load(MODELS / "conv_zoo" / "conv_zoo.pnnx.param", backend="numpy")
    plan = next(iter(zoo.plans.values()))
    assert plan.aliases == {"13": "12"} and np.shares_memory(plan.tensors["13"].data, plan.tensors["12"].data)
    up_grouped = [k for k, op in enumerate(zoo.order) if op.name == "up_grouped"][0]
    assert next(l.last for l in plan.lifetimes if l.key == "12") == up_grouped  # read under its second name


def test_the_commands_in_the_notes(capsys):
    outputs = check_shell_commands(10, capsys)
    before, after = outputs["kuiper inspect --backend reference"], outputs["kuiper inspect"]
    assert "51 operators" in before and "fusion pass" not in before
    assert "the copies and fusion passes (51 operators -> 26" in after
    assert "convbn2d_2: convbn2d_2 (nn.Conv2d) + pnnx_expr_14 (pnnx.Expression) + pnnx_unique_0 (nn.ReLU)" in after
    for text in (before, after):
        assert "parameters: 11,684,712" in text
