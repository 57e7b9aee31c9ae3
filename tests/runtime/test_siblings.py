"""The sibling-projections pass (kuiper/runtime/siblings.py): q, k and v Linears on one input, each cut into heads
by a reshape and a permute, joined into one product whose split and cuts the heads pass makes one operator; a
Linear without a bias and one whose output a ReLU reads left alone. Outputs against numpy's formula, on every
backend and usable OpenCL device."""

import numpy as np
import pytest

import kuiper
from tests.conftest import assert_forwards_match, linear_weights, write_model

MODEL = """7767517
15 14
pnnx.Input               in0     0 1 x #x=(1,?,8)f32
nn.Linear                q       1 1 x q0 bias=True in_features=8 out_features=16 @weight=(16,8)f32 @bias=(16)f32 #q0=(1,?,16)f32
Tensor.reshape           qs      1 1 q0 q1 shape=(1,-1,2,8) #q1=(1,?,2,8)f32
Tensor.permute           qh      1 1 q1 q2 dims=(0,2,1,3) #q2=(1,2,?,8)f32
nn.Linear                k       1 1 x k0 bias=True in_features=8 out_features=8 @weight=(8,8)f32 @bias=(8)f32 #k0=(1,?,8)f32
Tensor.reshape           ks      1 1 k0 k1 shape=(1,-1,1,8) #k1=(1,?,1,8)f32
Tensor.permute           kh      1 1 k1 k2 dims=(0,2,1,3) #k2=(1,1,?,8)f32
nn.Linear                v       1 1 x v0 bias=True in_features=8 out_features=8 @weight=(8,8)f32 @bias=(8)f32 #v0=(1,?,8)f32
Tensor.reshape           vs      1 1 v0 v1 shape=(1,-1,1,8) #v1=(1,?,1,8)f32
Tensor.permute           vh      1 1 v1 v2 dims=(0,2,1,3) #v2=(1,1,?,8)f32
nn.Linear                u       1 1 x u0 bias=False in_features=8 out_features=8 @weight=(8,8)f32 #u0=(1,?,8)f32
Tensor.reshape           us      1 1 u0 u1 shape=(1,-1,2,4) #u1=(1,?,2,4)f32
nn.Linear                r       1 1 x r0 bias=True in_features=8 out_features=8 @weight=(8,8)f32 @bias=(8)f32 #r0=(1,?,8)f32
nn.ReLU                  rr      1 1 r0 r1 #r1=(1,?,8)f32
pnnx.Output              out     5 0 q2 k2 v2 u1 r1
"""
SHAPES = {"q": (16, True), "k": (8, True), "v": (8, True), "u": (8, False), "r": (8, True)}


@pytest.fixture(scope="module")
def weights():
    return linear_weights(SHAPES, 8, seed=6)


@pytest.fixture
def model(tmp_path, weights):
    return write_model(tmp_path, "siblings", MODEL, weights)


def expected(x, w):
    def linear(name):
        return x @ w[f"{name}.weight"].T + w.get(f"{name}.bias", 0)

    def heads(y, count):
        return y.reshape(1, -1, count, y.shape[-1] // count).transpose(0, 2, 1, 3)
    return [heads(linear("q"), 2), heads(linear("k"), 1), heads(linear("v"), 1), linear("u").reshape(1, -1, 2, 4),
            np.maximum(linear("r"), 0)]


def check(graph, w) -> None:
    types = {op.name: op.type for op in graph.order}
    assert types["q"] == "nn.Linear+nn.Linear+nn.Linear"
    assert types["q.split"] == "torch.split+Tensor.reshape+Tensor.permute"
    assert {"u", "r"} <= set(types) and not {"k", "v"} & set(types)
    assert_forwards_match(graph, lambda x: expected(x, w), (3, 11), 8, seed=7)


def test_numpy_joins_the_projections(model, weights):
    check(kuiper.load(model, backend="numpy"), weights)
    assert len(kuiper.load(model, backend="reference").order) == 15  # the file as it is


def test_opencl_joins_the_projections(model, weights, cl_runtime):
    from kuiper.opencl.devices import spec_of

    check(kuiper.load(model, backend="opencl", device=spec_of(cl_runtime.device)), weights)
