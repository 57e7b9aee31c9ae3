"""Checkpoint of lesson 11: the breadth-first search of exercises/lesson_11.py over the reader's records, held to
the order in which kuiper's forward runs the file's operators (the reference backend's graph.order) on every
committed model and on graphs whose file order is not the order the search finds. A constant that pnnx wrote
only to repeat a module's own tied weight is dropped by build (kuiper/runtime/tied.py) and never runs: the
search's order is compared without it."""

import pytest

import kuiper
import kuiper.pnnx
from lesson_tools import BLOCK, MODEL_PARAMS, exercise

ex = exercise(11)


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_bfs_order_is_forwards_order(param):
    graph = kuiper.load(param, backend="reference")
    unfused = kuiper.RuntimeGraph(param, backend="numpy").init()
    dropped = {op.name for op in unfused.operators} - {op.name for op in graph.operators}
    order = ex.bfs_order(kuiper.pnnx.parse_param(param))
    assert dropped <= set(order)
    assert [name for name in order if name not in dropped] == [op.name for op in graph.order]


# a branch that the file lists first, and an operator that reads one operand in two slots (torch.cat([x, x]))
BRANCHES = """7767517
8 7
pnnx.Input       in0    0 1 x #x=(1,2,3,3)f32
nn.ReLU          long1  1 1 x a #x=(1,2,3,3)f32 #a=(1,2,3,3)f32
nn.ReLU          long2  1 1 a b #a=(1,2,3,3)f32 #b=(1,2,3,3)f32
nn.Sigmoid       short  1 1 x c #x=(1,2,3,3)f32 #c=(1,2,3,3)f32
torch.cat        twice  2 1 c c d dim=1 #c=(1,2,3,3)f32 #d=(1,4,3,3)f32
torch.cat        join   2 1 b b e dim=1 #b=(1,2,3,3)f32 #e=(1,4,3,3)f32
pnnx.Expression  add    2 1 d e f expr=add(@0,@1) #d=(1,4,3,3)f32 #e=(1,4,3,3)f32 #f=(1,4,3,3)f32
pnnx.Output      out0   1 0 f
"""


@pytest.mark.parametrize("text", [BLOCK, BRANCHES], ids=["block", "branches"])
def test_bfs_order_on_small_graphs(tmp_path, text):
    path = tmp_path / "small.pnnx.param"
    path.write_text(text)
    graph = kuiper.load(path, backend="reference")
    order = ex.bfs_order(kuiper.pnnx.parse_param(path))
    assert order == [op.name for op in graph.order]
    if text is BRANCHES:
        assert order != [op.name for op in graph.operators]      # not the file's order
