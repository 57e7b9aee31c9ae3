"""Checkpoint of lesson 5: exercises/lesson_05.py links successors and finds shared operands from the
reader's records, held to what RuntimeGraph.init() links."""

import pytest

import kuiper
import kuiper.pnnx
from lesson_tools import MODEL_PARAMS, RESNET, exercise

ex = exercise(5)


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_successors_are_what_init_links(param):
    graph = kuiper.RuntimeGraph(param, backend="reference").init()
    expected = {op.name: [s.name for s in op.successors] for op in graph.operators}
    assert ex.successors(kuiper.pnnx.parse_param(param)) == expected


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_shared_operands_are_those_with_several_consumer_slots(param):
    graph = kuiper.RuntimeGraph(param, backend="reference").init()
    expected = [name for name, operand in graph.operands.items() if len(operand.consumers) > 1]
    assert list(ex.shared_operands(kuiper.pnnx.parse_param(param))) == expected


def test_resnet18_has_eight_skip_connections():
    assert len(ex.shared_operands(kuiper.pnnx.parse_param(RESNET))) == 8
