"""The fast nn.Linear (kuiper/cpu/linear.py), on 1 to 3 threads, against the reference layer
(kuiper/layers/linear.py, checked against a per-feature sum in tests/layers/test_linear.py), and with the
epilogues the fusion pass gives it against the reference backend."""

import math

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference, write_model
from cpu_tools import THREADS, running_on

import kuiper
from kuiper.cpu import linear, threads

RNG = np.random.default_rng(31)


@pytest.fixture(autouse=True)
def splits(monkeypatch):
    """Every split of the GEMM over kuiper's threads worth making, however little work it is."""
    monkeypatch.setattr(threads, "MIN_MACS", 1)


# (in_features, out_features, input shape): ranks 1 to 4; many output features split the GEMM's columns over
# the threads, few its rows
@pytest.mark.parametrize("features, shape", [
    ((7, 5), (7,)), ((7, 5), (1, 7)), ((7, 5), (3, 7)), ((7, 5), (3, 5, 7)), ((7, 5), (2, 3, 1, 7)),
    ((33, 300), (40, 33)), ((17, 3), (130, 17)), ((64, 1000), (1, 64)),
], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_fast_matches_reference(features, shape, bias):
    n_in, n_out = features
    attrs = {"weight": RNG.standard_normal((n_out, n_in)).astype(np.float32)}
    if bias:
        attrs["bias"] = RNG.standard_normal(n_out).astype(np.float32)
    x = RNG.standard_normal(shape).astype(np.float32)
    params = dict(in_features=n_in, out_features=n_out, bias=bias)
    assert assert_every_path_matches_reference("nn.Linear", x, params=params, attrs=attrs) == ["forward_numpy"]


def linear_graph(tmp_path, shape: tuple, steps: str):
    """The path of a graph: Linear over `shape`'s last axis (as many features out as in), `steps` (pnnx lines
    from its output `a` to `t`), then a flatten (a graph output is never fused)."""
    n = shape[-1]
    dims = ",".join(map(str, shape))
    fc = f"bias=True in_features={n} out_features={n} @bias=({n})f32 @weight=({n},{n})f32"
    count = steps.count("\n")
    text = f"""7767517
{4 + count} {3 + count}
pnnx.Input               in0     0 1 x #x=({dims})f32
nn.Linear                fc      1 1 x a {fc} #a=({dims})f32
{steps}torch.flatten            flat    1 1 t y start_dim=1 end_dim=-1 #y=({shape[0]},{math.prod(shape[1:])})f32
pnnx.Output              out     1 0 y
"""
    weights = {"fc.weight": RNG.standard_normal((n, n)) / math.sqrt(n), "fc.bias": RNG.standard_normal(n)}
    return write_model(tmp_path, "fc", text, weights)


EPILOGUES = {
    "gelu": ("nn.GELU                  act     1 1 a t #t=({dims})f32\n", ["fc", "act"]),
    "residual relu": ("pnnx.Expression          add     2 1 a x s expr=add(@0,@1) #s=({dims})f32\n"
                      "nn.ReLU                  act     1 1 s t #t=({dims})f32\n", ["fc", "add", "act"]),
}


# (batch, tokens, features): 201 and 202 rows split unevenly over 2 and 3 threads; 50 rows are too few to split
@pytest.mark.parametrize("shape", [(3, 67, 200), (2, 101, 200), (1, 50, 200)], ids=str)
@pytest.mark.parametrize("split", ["rows", "rows in chunks", "columns"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_fused_epilogue_matches_reference(tmp_path, monkeypatch, epilogue, split, shape):
    """GELU, or a residual sum and ReLU, run by each thread on the rows it has computed (in chunks of a few rows
    where CHUNK_BYTES is small), or after the GEMM split by columns (where the weights are too large)."""
    if split == "rows in chunks":
        monkeypatch.setattr(linear, "CHUNK_BYTES", 3000)  # chunks of 3 and 4 rows
    if split == "columns":
        monkeypatch.setattr(linear, "ROW_SPLIT_WEIGHT_BYTES", 0)
    steps, absorbed = EPILOGUES[epilogue]
    path = linear_graph(tmp_path, shape, steps.format(dims=",".join(map(str, shape))))
    x = RNG.standard_normal(shape, dtype=np.float32)
    expected = kuiper.load(path, backend="reference").forward(x)[0]
    g = kuiper.load(path, backend="numpy")
    assert {op.name: [a.name for a in op.absorbed] for op in g.order if op.absorbed} == {"fc": absorbed}
    for count in THREADS:
        with running_on(count):
            np.testing.assert_allclose(g.forward(x)[0], expected, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{count} thread(s)")
