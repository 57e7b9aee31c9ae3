"""The gated-MLP pass (kuiper/runtime/gated.py): silu(gate(x)) * up(x) joined into one operator, with a bias and
without, of a width whose halves the OpenCL GEMM pairs in its store (a multiple of 16) and of one it does not;
three lookalikes left alone. Outputs against numpy's formula, on every backend and usable OpenCL device."""

import numpy as np
import pytest

import kuiper
from tests.conftest import assert_forwards_match, linear_weights, write_model

# j: a gated unit with biases, 32 wide; k: one without, 24 wide, its product's operands the other way round. Left
# alone: p (its up projection reads another operand), q (the gate's SiLU is also a graph output), r (a product of
# two Linears without a SiLU)
MODEL = """7767517
22 21
pnnx.Input               in0     0 1 x #x=(1,?,8)f32
nn.Linear                jg      1 1 x jg0 bias=True in_features=8 out_features=32 @weight=(32,8)f32 @bias=(32)f32 #jg0=(1,?,32)f32
nn.Linear                ju      1 1 x ju0 bias=True in_features=8 out_features=32 @weight=(32,8)f32 @bias=(32)f32 #ju0=(1,?,32)f32
F.silu                   ja      1 1 jg0 js #js=(1,?,32)f32
pnnx.Expression          jm      2 1 js ju0 j expr=mul(@0,@1) #j=(1,?,32)f32
nn.Linear                kg      1 1 x kg0 bias=False in_features=8 out_features=24 @weight=(24,8)f32 #kg0=(1,?,24)f32
nn.Linear                ku      1 1 x ku0 bias=False in_features=8 out_features=24 @weight=(24,8)f32 #ku0=(1,?,24)f32
nn.SiLU                  ka      1 1 kg0 ks #ks=(1,?,24)f32
pnnx.Expression          km      2 1 ku0 ks k expr=mul(@0,@1) #k=(1,?,24)f32
nn.ReLU                  xr      1 1 x xp #xp=(1,?,8)f32
nn.Linear                pg      1 1 x pg0 bias=False in_features=8 out_features=16 @weight=(16,8)f32 #pg0=(1,?,16)f32
nn.Linear                pu      1 1 xp pu0 bias=False in_features=8 out_features=16 @weight=(16,8)f32 #pu0=(1,?,16)f32
F.silu                   pa      1 1 pg0 ps #ps=(1,?,16)f32
pnnx.Expression          pm      2 1 ps pu0 p expr=mul(@0,@1) #p=(1,?,16)f32
nn.Linear                qg      1 1 x qg0 bias=False in_features=8 out_features=16 @weight=(16,8)f32 #qg0=(1,?,16)f32
nn.Linear                qu      1 1 x qu0 bias=False in_features=8 out_features=16 @weight=(16,8)f32 #qu0=(1,?,16)f32
F.silu                   qa      1 1 qg0 qs #qs=(1,?,16)f32
pnnx.Expression          qm      2 1 qs qu0 q expr=mul(@0,@1) #q=(1,?,16)f32
nn.Linear                rg      1 1 x rg0 bias=False in_features=8 out_features=16 @weight=(16,8)f32 #rg0=(1,?,16)f32
nn.Linear                ru      1 1 x ru0 bias=False in_features=8 out_features=16 @weight=(16,8)f32 #ru0=(1,?,16)f32
pnnx.Expression          rm      2 1 rg0 ru0 r expr=mul(@0,@1) #r=(1,?,16)f32
pnnx.Output              out     6 0 j k p q qs r
"""
SHAPES = {"jg": (32, True), "ju": (32, True), "kg": (24, False), "ku": (24, False), "pg": (16, False),
          "pu": (16, False), "qg": (16, False), "qu": (16, False), "rg": (16, False), "ru": (16, False)}


@pytest.fixture(scope="module")
def weights():
    return linear_weights(SHAPES, 8, seed=4, scale=0.5)


@pytest.fixture
def model(tmp_path, weights):
    return write_model(tmp_path, "gated", MODEL, weights)


def expected(x, w):
    def linear(name, v):
        return v @ w[f"{name}.weight"].T + w.get(f"{name}.bias", 0)

    def silu(z):
        return z / (1 + np.exp(-z))
    qs = silu(linear("qg", x))
    return [silu(linear("jg", x)) * linear("ju", x), linear("ku", x) * silu(linear("kg", x)),
            silu(linear("pg", x)) * linear("pu", np.maximum(x, 0)), qs * linear("qu", x), qs,
            linear("rg", x) * linear("ru", x)]


def check(graph, w) -> None:
    joined = {op.name: op.type for op in graph.order if op.type.startswith("nn.Linear+nn.Linear")}
    assert joined == {"jg": "nn.Linear+nn.Linear+F.silu+pnnx.Expression",
                      "kg": "nn.Linear+nn.Linear+nn.SiLU+pnnx.Expression"}
    assert not {"ja", "jm", "ju", "ka", "km", "ku"} & {op.name for op in graph.order}
    assert_forwards_match(graph, lambda x: expected(x, w), (5, 13), 8, seed=5)


def test_numpy_joins_the_gated_units(model, weights):
    check(kuiper.load(model, backend="numpy"), weights)
    assert len(kuiper.load(model, backend="reference").order) == 22  # the file as it is


def test_opencl_joins_the_gated_units(model, weights, cl_runtime):
    from kuiper.opencl.devices import spec_of

    check(kuiper.load(model, backend="opencl", device=spec_of(cl_runtime.device)), weights)
