"""The claims of lesson 5: init() links exactly the graph the .param text describes; build() keeps it on the
reference backend and relinks the operators the numpy backend's fusion pass rewrites."""

import numpy as np
import pytest

import kuiper
from kuiper import GraphError, GraphState
from kuiper.app import inspection
from kuiper.layers.expression import Expression
from kuiper.layers.relu import ReLU
from kuiper.layers.sigmoid import Sigmoid
from lesson_tools import MODELS, RESNET, check_shell_commands, manifest, param_lines, BLOCK, MODEL_PARAMS



def links_from_text(param):
    """(inputs, outputs, successors) per operator name, computed from the tokens alone."""
    lines = param_lines(param)
    inputs = {t[1]: t[4:4 + int(t[2])] for t in lines}
    outputs = {t[1]: t[4 + int(t[2]):4 + int(t[2]) + int(t[3])] for t in lines}
    successors = {}
    for t in lines:
        found = []
        for operand in outputs[t[1]]:
            for other in lines:  # consumers in file order, one per slot
                for used in inputs[other[1]]:
                    if used == operand and other[1] not in found:
                        found.append(other[1])
        successors[t[1]] = found
    return inputs, outputs, successors


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_init_links_what_the_text_says(param):
    graph = kuiper.RuntimeGraph(param, backend="numpy").init()
    inputs, outputs, successors = links_from_text(param)
    assert [op.name for op in graph.operators] == list(inputs)
    for op in graph.operators:
        assert [o.name for o in op.input_operands] == inputs[op.name]
        assert [o.name for o in op.output_operands] == outputs[op.name]
        assert [s.name for s in op.successors] == successors[op.name]
        for operand in op.output_operands:
            assert operand.producer is op
            assert operand is graph.operands[operand.name]
        for slot, operand in enumerate(op.input_operands):
            assert operand is graph.operands[inputs[op.name][slot]]
            assert op in operand.consumers
    # every consumer entry is one input slot somewhere
    assert sum(len(o.consumers) for o in graph.operands.values()) == sum(len(v) for v in inputs.values())
    # what meet_num counts: the input slots of each successor that each producer fills
    producer = {operand: name for name, outs in outputs.items() for operand in outs}
    for op in graph.operators:
        assert op.meet_num == 0 and op.absorbed == []
        for succ in op.successors:
            assert succ.slots_fed_by(op) == sum(producer[o] == op.name for o in inputs[succ.name]) >= 1


def test_states_move_forward_only_through_init_and_build(tmp_path):
    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    graph = kuiper.RuntimeGraph(path, backend="numpy")
    assert graph.state == GraphState.NEED_INIT == -2
    with pytest.raises(GraphError, match="call build"):
        graph.forward(np.zeros((1, 2, 3, 3), np.float32))
    graph.init()
    assert graph.state == GraphState.NEED_BUILD == -1
    assert all(op.layer is None for op in graph.operators)
    graph.build()
    assert graph.state == GraphState.COMPLETE == 0
    assert graph.input_operators == [graph.operators[0]]
    assert graph.output_operands == [graph.operands["d"]]
    # a fresh graph reaches COMPLETE through build() alone
    assert kuiper.RuntimeGraph(path, backend="numpy").build().state == GraphState.COMPLETE


def test_build_keeps_the_files_operators_on_the_reference_backend(tmp_path):
    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    graph = kuiper.RuntimeGraph(path, backend="reference").build()
    # exactly the registered (reference) classes, one per operator of the file
    assert [type(op.layer) for op in graph.operators] == \
        [type(None), ReLU, Expression, Expression, Sigmoid, type(None)]
    assert [op.name for op in graph.operators] == [t[1] for t in param_lines(path)]
    assert all(op.layer.op is op for op in graph.operators if op.layer is not None)


def test_the_fusion_pass_relinks_what_it_rewrites(tmp_path):
    """On numpy, `scale` (an Expression that applies epilogues) takes the add after it: one operator reading
    both a and x, whose successors and the operands' consumers are linked anew."""
    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    graph = kuiper.RuntimeGraph(path, backend="numpy").build()
    assert [op.name for op in graph.operators] == ["in0", "relu", "scale", "sig", "out0"]
    in0, relu, scale, sig, _ = graph.operators
    assert scale.type == "pnnx.Expression+pnnx.Expression" and [op.name for op in scale.absorbed] == ["scale", "add"]
    assert [o.name for o in scale.input_operands] == ["a", "x"] and scale.output_operand.name == "c"
    assert [s.name for s in in0.successors] == ["relu", "scale"] and relu.successors == [scale]
    assert graph.operands["x"].consumers == [relu, scale] and graph.operands["c"].producer is scale
    assert scale.slots_fed_by(in0) == scale.slots_fed_by(relu) == 1
    # every layer is the registered class or its fast subclass (kuiper/cpu/), with the same interface
    for op, reference in ((relu, ReLU), (sig, Sigmoid)):
        assert isinstance(op.layer, reference) and op.layer.op is op
    for op in graph.operators:
        consumers = [c for operand in op.output_operands for c in operand.consumers]
        assert op.successors == list(dict.fromkeys(consumers))  # each once, in order of first use


def test_mermaid_has_one_node_per_operator_and_one_edge_per_successor(tmp_path):
    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    graph = kuiper.RuntimeGraph(path, backend="numpy").init()
    lines = inspection.mermaid(graph).splitlines()
    assert lines[0] == "flowchart TD"
    assert sum("-->" in line for line in lines) == sum(len(op.successors) for op in graph.operators) == 6
    assert sum("[" in line and "-->" not in line for line in lines) == 6


def test_tuple_outputs_are_flattened_and_skip_connections_found():
    pool = kuiper.RuntimeGraph(MODELS / "pool_zoo" / "pool_zoo.pnnx.param", backend="numpy").init()
    tuple_line = next(t for t in param_lines(MODELS / "pool_zoo" / "pool_zoo.pnnx.param")
                      if t[0] == "prim::TupleConstruct")
    assert [o.name for o in pool.output_operands] == tuple_line[4:4 + int(tuple_line[2])]

    resnet = kuiper.RuntimeGraph(RESNET, backend="numpy").init()
    shared = [o for o in resnet.operands.values() if len(o.consumers) > 1]
    assert len(shared) == 8
    # a skip connection ends in an add: one consumer of each shared operand is a pnnx.Expression or
    # a 1x1 downsampling convolution
    for operand in shared:
        kinds = {c.type for c in operand.consumers}
        assert kinds <= {"nn.Conv2d", "pnnx.Expression"}


def test_attributes_stay_views_of_the_bin():
    resnet = kuiper.RuntimeGraph(RESNET, backend="numpy").init()
    fc = next(op for op in resnet.operators if op.name == "fc")
    weight = fc.attrs["weight"]
    assert weight.shape == (1000, 512) and weight.dtype == "f32" and weight.nbytes == 1000 * 512 * 4
    assert not weight.numpy().flags.owndata
    assert fc.params["out_features"].value == 1000 and fc.params["out_features"].type == 2


def test_resnet_on_numpy_fuses_each_relu_into_its_convolution():
    resnet = kuiper.load(RESNET, backend="numpy")
    fused = next(op for op in resnet.operators if op.name == "convbn2d_1")
    assert [op.name for op in fused.absorbed] == ["convbn2d_1", "layer1.0.relu"]
    assert fused.successors == [next(op for op in resnet.operators if op.name == "convbn2d_2")]
    assert len(resnet.operators) == 51 - 17 - 8  # every ReLU and residual add absorbed


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(5, capsys)
