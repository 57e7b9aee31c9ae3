"""Checkpoint of lesson 18: the custom operator exercises/lesson_18.py writes, loaded by kuiper from its config
and run in a graph on the OpenCL and numpy backends, held to the formula with and without `alpha`."""

import numpy as np
import pytest

import kuiper
from kuiper.opencl import get_runtime
from lesson_tools import exercise

ex = exercise(18)

GRAPH = """7767517
4 3
pnnx.Input   in0    0 1 x #x=(2,3,4,5)f32
nn.Softsign  given  1 1 x y alpha=2.0 #x=(2,3,4,5)f32 #y=(2,3,4,5)f32
nn.Softsign  plain  1 1 y z #y=(2,3,4,5)f32 #z=(2,3,4,5)f32
pnnx.Output  out0   1 0 z
"""


def softsign(x, alpha):
    return x / (alpha + np.abs(x))


@pytest.mark.parametrize("backend", ["opencl", "numpy"])
def test_softsign_with_alpha_in_a_graph(tmp_path, backend):
    folder = tmp_path / "op"
    folder.mkdir()
    config = ex.write_softsign_op(folder)
    assert config.exists() and config.parent == folder
    (tmp_path / "soft.pnnx.param").write_text(GRAPH)
    graph = kuiper.load(tmp_path / "soft.pnnx.param", backend=backend, custom_ops=[config])
    assert {type(op.layer).__name__ for op in graph.operators if op.type == "nn.Softsign"} == {"CustomLayer"}
    x = np.linspace(-6, 6, 120, dtype=np.float32).reshape(2, 3, 4, 5)
    (z,) = graph.forward(x)
    np.testing.assert_allclose(z, softsign(softsign(x, 2.0), 1.0), rtol=1e-5, atol=1e-6)


def test_alpha_is_a_define(tmp_path):
    config = ex.write_softsign_op(tmp_path)
    (tmp_path / "soft.pnnx.param").write_text(GRAPH)
    graph = kuiper.load(tmp_path / "soft.pnnx.param", backend="opencl", custom_ops=[config])
    given, plain = (op.layer for op in graph.operators if op.type == "nn.Softsign")
    assert given.params == {"alpha": 2.0} and plain.params == {"alpha": 1.0}
    assert any(o.startswith("-DALPHA=2") for o in given.param_options)
    assert get_runtime() is not None
