"""The claims of lesson 17: upsampling, cat, chunk and SiLU against formulas written from their definitions,
unet_tiny and expr_two_inputs against PyTorch on both backends, other input sizes, several inputs and outputs."""

import re

import numpy as np
import pytest

import kuiper
from kuiper import InputError, ShapeError
from conftest import on_opencl
from kuiper.runtime.backends import make_layer
from lesson_tools import MODELS, check_shell_commands, model_case, param_lines
from kuiper.opencl.devices import spec_of

RNG = np.random.default_rng(16)
UNET = MODELS / "unet_tiny" / "unet_tiny.pnnx.param"
TWO = MODELS / "expr_two_inputs" / "expr_two_inputs.pnnx.param"


def close(got, want, rtol=1e-4):
    scale = max(1.0, float(np.abs(want).max()))
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=rtol * scale))


@pytest.fixture(scope="module", params=["numpy", "opencl"])
def backend(request, cl_runtime):
    """(backend name, the runtime on opencl or None): every test below runs on both."""
    return request.param, (cl_runtime if request.param == "opencl" else None)


def run(layer, backend, *arrays):
    name, rt = backend
    return layer.run_numpy(*arrays) if name == "numpy" else on_opencl(layer).run_opencl(rt, *arrays)


def load(path, backend):
    name, rt = backend
    return kuiper.load(path, backend=name, device=None if rt is None else spec_of(rt.device))


# ---- upsampling: PyTorch's index rules as an interpolation matrix per axis -----------------------------
def interpolation(mode, n_in, n_out, align_corners=False, scale_factor=None):
    """(n_out, n_in) matrix M with out = M @ in along one axis, written from PyTorch's source-index rules."""
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        if mode == "nearest":  # floor(o * scale) in float32, scale = 1 / scale_factor or in / out
            scale = np.float32(1 / scale_factor) if scale_factor else np.float32(n_in) / np.float32(n_out)
            m[o, min(int(np.floor(np.float32(o) * scale)), n_in - 1)] = 1
            continue
        if align_corners:
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:  # pixel centres aligned; positions before the first centre read the first pixel
            scale = 1 / scale_factor if scale_factor else n_in / n_out
            src = max((o + 0.5) * scale - 0.5, 0.0)
        left = min(int(np.floor(src)), n_in - 1)
        right, t = min(left + 1, n_in - 1), src - left
        m[o, left] += 1 - t
        m[o, right] += t
    return m


def resize(x, mode, out_hw, align_corners=False, scale_factor=(None, None)):
    rows, cols = (interpolation(mode, n_in, n_out, align_corners, s)
                  for n_in, n_out, s in zip(x.shape[2:], out_hw, scale_factor))
    return np.einsum("oh,nchw,pw->ncop", rows, x.astype(np.float64), cols)


def test_the_reference_resize_reproduces_pytorch():
    """The matrices above against PyTorch's saved outputs of models/resize_zoo (their input: a 1x1 conv)."""
    graph = kuiper.load(MODELS / "resize_zoo" / "resize_zoo.pnnx.param", backend="numpy")
    _, (x,), refs = model_case("resize_zoo", "b2")
    mix = graph.operators[1]
    w, b = mix.attrs["weight"].numpy()[:, :, 0, 0], mix.attrs["bias"].numpy()
    mixed = np.einsum("oc,nchw->nohw", w.astype(np.float64), x) + b[None, :, None, None]
    assert close(resize(mixed, "nearest", (14, 18), scale_factor=(2.0, 2.0)), refs[0])
    assert close(resize(mixed, "nearest", (10, 13), scale_factor=(1.5, 1.5)), refs[1])
    assert close(resize(mixed, "nearest", (10, 20)), refs[2])
    assert close(resize(mixed, "bilinear", (12, 5), align_corners=True), refs[3])
    assert close(resize(mixed, "bilinear", (10, 22), scale_factor=(1.5, 2.5)), refs[4])


@pytest.mark.parametrize("mode, align_corners, params, out_hw", [
    ("nearest", False, dict(scale_factor=[2.0, 2.0]), (10, 14)),
    ("nearest", False, dict(size=[7, 16]), (7, 16)),
    ("bilinear", False, dict(scale_factor=[2.0, 2.0]), (10, 14)),
    ("bilinear", False, dict(scale_factor=[1.5, 3.0]), (7, 21)),
    ("bilinear", True, dict(size=[9, 4]), (9, 4)),
])
def test_upsample_matches_the_reference(backend, mode, align_corners, params, out_hw):
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    extra = {} if mode == "nearest" else dict(align_corners=align_corners)
    layer = make_layer("nn.Upsample", input_shapes=(x.shape,), params=dict(mode=mode, **extra, **params))
    (y,) = run(layer, backend, x)
    scales = tuple(params.get("scale_factor", (None, None)))
    np.testing.assert_allclose(y, resize(x, mode, out_hw, align_corners, scales), rtol=1e-5, atol=1e-5)


# ---- cat, chunk, SiLU -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, 3, -1])
def test_cat_joins_like_numpy(backend, dim):
    shapes = [[2, 3, 4, 5] for _ in range(3)]
    for shape, extra in zip(shapes, (1, 2, 3)):
        shape[dim] = extra  # inputs differ only along dim
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    layer = make_layer("torch.cat", params=dict(dim=dim), input_shapes=[tuple(s) for s in shapes])
    (y,) = run(layer, backend, *arrays)
    np.testing.assert_array_equal(y, np.concatenate(arrays, axis=dim))


def chunk_sizes(length, chunks):
    """torch.chunk's rule: pieces of ceil(length / chunks), the last one what is left."""
    step = -(-length // chunks)
    return [min(step, length - start) for start in range(0, length, step)]


@pytest.mark.parametrize("length, chunks, dim", [(7, 3, 1), (6, 4, 1), (8, 2, 0), (5, 5, -1), (9, 4, 2)])
def test_chunk_cuts_by_the_ceil_rule(backend, length, chunks, dim):
    shape = [3, 4, 5]
    shape[dim] = length
    x = RNG.standard_normal(shape).astype(np.float32)
    sizes = chunk_sizes(length, chunks)
    assert sum(sizes) == length and len(sizes) <= chunks
    layer = make_layer("torch.chunk", params=dict(chunks=chunks, dim=dim), input_shapes=(x.shape,),
                       num_outputs=len(sizes))
    pieces = run(layer, backend, x)
    expected = np.split(x, np.cumsum(sizes)[:-1], axis=dim)
    assert [p.shape for p in pieces] == [e.shape for e in expected]
    for got, want in zip(pieces, expected):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ShapeError, match="pieces"):  # a graph exported with another number of pieces
        make_layer("torch.chunk", params=dict(chunks=chunks, dim=dim), input_shapes=(x.shape,),
                   num_outputs=len(sizes) + 1).output_shapes([x.shape])


def test_silu_against_float64(backend):
    x = np.concatenate([np.linspace(-20, 20, 401), [-100.0, -88.0, 88.0, 100.0]]).astype(np.float32)
    layer = make_layer("nn.SiLU", input_shapes=(x.shape,))
    with np.errstate(over="raise", invalid="raise"):
        (y,) = run(layer, backend, x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, x64 / (1 + np.exp(-x64)), rtol=2e-6, atol=1e-30)


# ---- whole models -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unet(backend):
    return load(UNET, backend)


@pytest.mark.parametrize("case", ["b2", "b1_64x40"])
def test_unet_matches_pytorch_at_both_sizes(unet, case):
    _, inputs, refs = model_case("unet_tiny", case)
    outputs = unet.forward(*inputs)
    assert len(outputs) == len(refs) == 2
    assert all(close(o, r) for o, r in zip(outputs, refs))


def test_the_outputs_are_the_tuple_parts_in_order(unet):
    tuple_line = next(t for t in param_lines(UNET) if t[0] == "prim::TupleConstruct")
    count = int(tuple_line[2])
    assert [o.name for o in unet.output_operands] == tuple_line[4:4 + count]
    assert [o.producer.name for o in unet.output_operands] == ["head_full", "head_low"]


def test_which_sizes_fit(unet):
    """Two poolings down and two upsamplings back must meet the skip connections: H and W multiples of 4."""
    for h in range(8, 22):
        for w in (12, 14, 40):
            fits = h % 4 == 0 and w % 4 == 0
            try:
                unet.plan_for((1, 3, h, w))
                assert fits, (h, w)
            except ShapeError as e:
                assert not fits and "torch.cat" in str(e), (h, w)
    with pytest.raises(InputError, match="torch.cat_1"):
        unet.forward(np.zeros((1, 3, 30, 40), np.float32))


@pytest.fixture(scope="module")
def two(backend):
    return load(TWO, backend)


def test_two_inputs_two_outputs_against_pytorch_and_the_param_formulas(two):
    _, (x0, x1), refs = model_case("expr_two_inputs", "b2")
    assert [op.name for op in two.input_operators] == ["pnnx_input_0", "pnnx_input_1"]
    out0, out1 = two.forward(x0, x1)
    assert close(out0, refs[0]) and close(out1, refs[1])
    # the four expressions of the .param file, in float64
    offset = two.operators[2].attrs["data"].numpy().astype(np.float64)
    x0, x1 = x0.astype(np.float64), x1.astype(np.float64)
    a = x0 + x1 * 2.5 - 1                                   # pnnx_expr_37: sub(add(@0,mul(@1,2.5)),1)
    b = -a / (np.abs(x1) + 1)                               # pnnx_expr_31: div(neg(@0),add(abs(@1),1))
    big = np.maximum(b ** 2 + np.sqrt(np.abs(x1) + 0.5) + 1 / np.sqrt(x0 * x0 + 1),
                     np.exp(-np.abs(x0)) + np.log(x1 * x1 + 1))
    np.testing.assert_allclose(out0, big - np.minimum(a, b) + offset, rtol=1e-5, atol=1e-5)  # pnnx_expr_1
    np.testing.assert_allclose(out1, 3 * a, rtol=1e-5, atol=1e-5)                          # pnnx_expr_0
    with pytest.raises(InputError, match="takes 2 input"):
        two.forward(x0.astype(np.float32))


def test_the_commands_in_the_notes(capsys, cl_runtime):
    outputs = check_shell_commands(17, capsys)
    params = sum(int(np.prod([int(d) for d in re.search(r"=\(([\d,]+)\)", t).group(1).split(",")]))
                 for line in param_lines(UNET) for t in line if t.startswith("@"))
    for command in ("kuiper inspect models/unet_tiny/unet_tiny.pnnx.param",
                    "kuiper inspect models/unet_tiny/unet_tiny.pnnx.param --input-shape 1,3,64,40"):
        assert f"parameters: {params:,}" in outputs[command]
    assert "1x6x16x10" in outputs["kuiper inspect models/unet_tiny/unet_tiny.pnnx.param --input-shape 1,3,64,40"]
    for command in ("kuiper run models/expr_two_inputs/expr_two_inputs.pnnx.param --backend opencl",
                    "kuiper run models/unet_tiny/unet_tiny.pnnx.param --batch 1"):
        assert "matches the saved PyTorch output" in outputs[command]
    assert "shape (1, 4, 64, 40)" in outputs["kuiper run models/unet_tiny/unet_tiny.pnnx.param --batch 1"]
