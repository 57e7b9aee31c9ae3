"""The cat-chains pass (kuiper/runtime/cats.py): a DenseNet-like block whose cats each repeat the one before's
inputs, a cat along another dim and one of other operands left alone; outputs against the reference backend,
which runs the file as it is."""

import numpy as np
import pytest

import kuiper
from kuiper.opencl.devices import spec_of

# a block of three layers: c1 joins (x, a), c2 (x, a, b), c3 (x, a, b, d); w joins (x, a, b) along the last dim
# and u (a, x): neither repeats an earlier cat's inputs in order along the same dim
BLOCK = """7767517
11 10
pnnx.Input               in0     0 1 x #x=(1,2,3,4)f32
nn.ReLU                  r1      1 1 x a #a=(1,2,3,4)f32
torch.cat                c1      2 1 x a j1 dim=1 #j1=(1,4,3,4)f32
nn.Sigmoid               s1      1 1 j1 b #b=(1,4,3,4)f32
torch.cat                c2      3 1 x a b j2 dim=1 #j2=(1,8,3,4)f32
nn.Tanh                  t2      1 1 j2 d #d=(1,8,3,4)f32
torch.cat                c3      4 1 x a b d j3 dim=1 #j3=(1,16,3,4)f32
torch.cat                w       3 1 x a x k dim=3 #k=(1,2,3,12)f32
torch.cat                u       2 1 a x m dim=1 #m=(1,4,3,4)f32
nn.ReLU                  r3      1 1 j3 y #y=(1,16,3,4)f32
pnnx.Output              out     3 0 y k m
"""


def reference(x):
    a = np.maximum(x, 0)
    b = 1 / (1 + np.exp(-np.concatenate([x, a], 1)))
    d = np.tanh(np.concatenate([x, a, b], 1))
    return [np.maximum(np.concatenate([x, a, b, d], 1), 0), np.concatenate([x, a, x], 3), np.concatenate([a, x], 1)]


@pytest.fixture
def block(tmp_path):
    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    return path


def check(graph) -> None:
    inputs = {op.name: [o.name for o in op.input_operands] for op in graph.order if "torch.cat" in op.type}
    assert inputs == {"c1": ["x", "a"], "c2": ["j1", "b"], "c3": ["j2", "d"], "w": ["x", "a", "x"], "u": ["a", "x"]}
    rng = np.random.default_rng(2)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 2, 3, 4), dtype=np.float32)
        for got, want in zip(graph.forward(x), reference(x)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_cat_reads_the_earlier_cat_of_its_first_inputs(block):
    check(kuiper.load(block, backend="numpy"))
    unchanged = kuiper.load(block, backend="reference")  # the reference runs the file as it is
    assert {op.name: len(op.input_operands) for op in unchanged.order if op.type == "torch.cat"} == {
        "c1": 2, "c2": 3, "c3": 4, "w": 3, "u": 2}


def test_opencl_cats_read_the_earlier_cats(block, cl_runtime):
    for schedule in ("inorder", "levels"):
        check(kuiper.load(block, backend="opencl", device=spec_of(cl_runtime.device), schedule=schedule))
