"""The claims of lesson 20: layer norm and attention written here from their definitions (loops over rows and
query positions in float64), first checked against what PyTorch saved for vit_tiny and attention_zoo, then
used as the reference for kuiper's reference, fast CPU and OpenCL layers; the transformer models against
PyTorch on every backend; what pnnx wrote; the export-batch limits; the commands in the notes."""

import math
import re

import numpy as np
import pytest

import kuiper
from conftest import NO_OPENCL, OPENCL_DEVICES
from kuiper import InputError
from kuiper.cpu import layer_norm as fast_layer_norm
from kuiper.cpu import threads
from kuiper.cpu.registry import fast_class
from kuiper.layers.registry import layer_class
from kuiper.opencl import get_runtime
from kuiper.opencl.registry import opencl_class
from kuiper.pnnx import load as read_pnnx
from kuiper.core.operators import make_operator
from lesson_tools import MODELS, check_shell_commands, model_case, notes_text, param_lines

RNG = np.random.default_rng(20)
PARAMS = {name: MODELS / name / f"{name}.pnnx.param"
          for name in ("vit_tiny", "swin_tiny", "attention_zoo", "convnext_tiny")}

OPENCL = [f"opencl {spec}" for spec in OPENCL_DEVICES] or [pytest.param("opencl", marks=pytest.mark.skip(NO_OPENCL))]


def close(got, want, rtol=1e-4):
    """The course's tolerance: max |diff| <= rtol * max(1, max |want|), and the same shape."""
    scale = max(1.0, float(np.abs(want).max())) if np.size(want) else 1.0
    return np.shape(got) == np.shape(want) and float(np.abs(got - want).max(initial=0.0)) <= rtol * scale


def data(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# ---- the definitions ----------------------------------------------------------------------------------------
def layer_norm_by_definition(x, dims, eps, weight=None, bias=None):
    """Every slice over the last `dims` dims on its own: its mean, its biased variance (divided by n), eps
    inside the square root, then the weight and bias of the slice's shape."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for index in np.ndindex(*x.shape[:x.ndim - dims]):
        values = [float(v) for v in x[index].ravel()]
        n = len(values)
        mean = math.fsum(values) / n
        variance = math.fsum((v - mean) ** 2 for v in values) / n
        y = (x[index] - mean) / math.sqrt(variance + eps)
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
        out[index] = y
    return out


def attend_by_definition(q, k, v, scale, forbidden=None, added=None):
    """One (L, D) query matrix against (S, D) keys and (S, Dv) values, one query at a time: the scaled dot
    product with each key it may see (plus `added`), the softmax of those, the weighted sum of their values.
    A query that may see no key at all gets a row of zeros."""
    out = np.zeros((len(q), v.shape[1]))
    for i in range(len(q)):
        logits = {}
        for j in range(len(k)):
            if forbidden is not None and forbidden[i][j]:
                continue
            score = scale * math.fsum(float(a) * float(b) for a, b in zip(q[i], k[j]))
            if added is not None:
                score += float(added[i][j])
            if score != -math.inf:
                logits[j] = score
        if not logits:
            continue
        top = max(logits.values())
        weights = {j: math.exp(s - top) for j, s in logits.items()}
        total = math.fsum(weights.values())
        for j, w in weights.items():
            out[i] += (w / total) * np.asarray(v[j], np.float64)
    return out


def sdpa_by_definition(q, k, v, mask=None, causal=False, scale=None):
    """F.scaled_dot_product_attention over every leading index: a bool mask says True = takes part, a float
    mask is added, causal lets query i see keys 0..i; scale 1/sqrt(D) unless given."""
    lead, (length, depth), keys = q.shape[:-2], q.shape[-2:], k.shape[-2]
    scale = 1 / math.sqrt(depth) if scale is None else scale
    if mask is not None:
        mask = np.broadcast_to(mask, lead + (length, keys))
    out = np.empty(lead + (length, v.shape[-1]))
    for index in np.ndindex(*lead):
        forbidden = np.zeros((length, keys), bool)
        if causal:
            forbidden |= np.arange(keys)[None, :] > np.arange(length)[:, None]
        added = None
        if mask is not None and mask.dtype == bool:
            forbidden |= ~mask[index]
        elif mask is not None:
            added = mask[index]
        out[index] = attend_by_definition(q[index], k[index], v[index], scale, forbidden, added)
    return out


def mha_by_definition(params, W, query, key, value, mask=None):
    """nn.MultiheadAttention: the in-projections, the heads as column slices, each head's attention scaled by
    1/sqrt(head_dim) with its mask (bool True = masked out, float added; (L, S) for every head or one per
    batch item and head), the heads side by side again, the out-projection."""
    E, H = params["embed_dim"], params["num_heads"]
    d = E // H
    unbatched = query.ndim == 2
    batch_first = params.get("batch_first", False)
    query, key, value = (np.asarray(x, np.float64)[None] if unbatched else
                         np.asarray(x, np.float64) if batch_first else np.asarray(x, np.float64).transpose(1, 0, 2)
                         for x in (query, key, value))
    if "in_proj_weight" in W:
        wq, wk, wv = np.split(W["in_proj_weight"], 3)
    else:
        wq, wk, wv = W["q_proj_weight"], W["k_proj_weight"], W["v_proj_weight"]
    bq, bk, bv = np.split(W["in_proj_bias"], 3) if "in_proj_bias" in W else (0.0, 0.0, 0.0)
    outputs = []
    for n in range(len(query)):
        q, k, v = query[n] @ wq.T + bq, key[n] @ wk.T + bk, value[n] @ wv.T + bv
        heads = []
        for h in range(H):
            m = None if mask is None else mask if mask.ndim == 2 else mask[n * H + h]
            forbidden = m if m is not None and m.dtype == bool else None
            added = m if m is not None and m.dtype != bool else None
            cols = slice(h * d, (h + 1) * d)
            heads.append(attend_by_definition(q[:, cols], k[:, cols], v[:, cols], 1 / math.sqrt(d), forbidden, added))
        outputs.append(np.hstack(heads) @ W["out_proj.weight"].T + W.get("out_proj.bias", 0.0))
    out = np.stack(outputs)
    return out[0] if unbatched else out if batch_first else out.transpose(1, 0, 2)


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def operators(path):
    """{operator name: (its parameters as plain values, its @ attributes in float64)}, read from the files."""
    graph = read_pnnx(path)
    return {op.name: ({key: p.value for key, p in op.params.items()},
                      {key: a.numpy().astype(np.float64) for key, a in op.attrs.items()})
            for op in graph.operators}


# ---- the definitions against PyTorch --------------------------------------------------------------------
def test_the_definitions_reproduce_pytorch_on_attention_zoo():
    """Both MHAs (a float (N*H, L, S) mask; cross-attention with its own k and v widths), SDPA with a float
    mask and causal, a LayerNorm over two dims without affine: as tools/export_models.py's AttentionZoo."""
    ops = operators(PARAMS["attention_zoo"])
    _, (x, mask, memory), refs = model_case("attention_zoo", "b2")
    a = mha_by_definition(*ops["self_attention"], x, x, x, mask=mask)
    b = mha_by_definition(*ops["cross_attention"], x, memory, memory)
    qkv_params, qkv = ops["qkv"]
    q, k, v = (x.astype(np.float64) @ qkv["weight"].T + qkv["bias"]).reshape(2, 5, 3, 2, 4).transpose(2, 0, 3, 1, 4)
    c = sdpa_by_definition(q, k, v, mask=mask.reshape(2, 2, 5, 5))
    d = sdpa_by_definition(q, k, v, causal=True)
    e = layer_norm_by_definition(x, 2, ops["norm"][0]["eps"])
    for mine, ref in zip((a, b, c, d, e), refs, strict=True):
        assert close(mine, ref, rtol=1e-5)
    # and they are not all the same thing: the mask and the causal cut matter
    assert not close(sdpa_by_definition(q, k, v), c) and not close(sdpa_by_definition(q, k, v), d)


def test_the_definitions_reproduce_pytorch_on_vit_tiny():
    """vit_tiny by hand from its weights: patches, class token, position embedding, two encoder blocks of
    LayerNorm, MHA and a GELU MLP, a last LayerNorm, the class token's row through the head."""
    ops = operators(PARAMS["vit_tiny"])
    _, (image,), (ref,) = model_case("vit_tiny", "b1")
    n = len(image)

    def linear(x, name):
        return x @ ops[name][1]["weight"].T + ops[name][1]["bias"]

    def norm(x, name):
        params, attrs = ops[name]
        assert params["normalized_shape"] == [32]
        return layer_norm_by_definition(x, 1, params["eps"], attrs["weight"], attrs["bias"])

    conv = ops["conv_proj"][1]
    patches = image.astype(np.float64).reshape(n, 3, 4, 8, 4, 8).transpose(0, 2, 4, 1, 3, 5).reshape(n, 16, 192)
    tokens = patches @ conv["weight"].reshape(32, 192).T + conv["bias"]
    h = np.concatenate([ops["pnnx_fold_batch_class_token.1"][1]["data"], tokens], axis=1)
    h = h + ops["encoder"][1]["data"]
    for i in range(2):
        block = f"encoder.layers.encoder_layer_{i}."
        y = norm(h, block + "ln_1")
        h = h + mha_by_definition(*ops[block + "self_attention"], y, y, y)
        h = h + linear(gelu(linear(norm(h, block + "ln_2"), block + "mlp.0")), block + "mlp.3")
    out = linear(norm(h, "encoder.ln")[:, 0], "heads.head")
    assert close(out, ref, rtol=1e-5)


# ---- kuiper's layers against the definitions --------------------------------------------------------------
@pytest.fixture(scope="module", params=["reference", "fast", *OPENCL])
def backend(request):
    """(name, OpenCL runtime or None): the reference layer's numpy forward, the fast CPU layer's, and the
    OpenCL layer's forward on each usable device."""
    name = request.param
    if name.startswith("opencl"):
        return "opencl", get_runtime(name.split(" ", 1)[1])
    return name, None


def build(type, backend, params=None, attrs=None, shapes=(), names=()):
    """The layer for a hand-made operator, with the input names pnnx would write."""
    op = make_operator(type, params=params, attrs=attrs, input_shapes=shapes)
    if names:
        op.input_names = list(names)
    if backend[0] == "fast":
        cls = fast_class(type)
        assert cls is not None and cls.__module__.startswith("kuiper.cpu."), type
    elif backend[0] == "opencl":
        cls = opencl_class(type)
        assert cls is not None and cls.__module__.startswith("kuiper.opencl."), type
    else:
        cls = layer_class(type, op.name)
    layer = cls(op)
    layer.check_params_read()
    return layer


def run(layer, backend, *arrays):
    name, rt = backend
    if name == "opencl":
        return layer.run_opencl(rt, *arrays)
    with threads.active():
        return layer.run_numpy(*arrays)


@pytest.mark.parametrize("shape, dims, affine", [
    ((2, 5, 8), 1, True), ((2, 5, 8), 2, False), ((3, 4, 5, 6), 3, True), ((7, 33), 1, True),
    ((3, 1000), 1, False), ((4, 1), 1, True)])
def test_layer_norm_is_the_definition(backend, shape, dims, affine):
    x = data(*shape, scale=3.0) + data(*shape[:-dims], *(1,) * dims, scale=5.0)   # each slice its own mean
    normalized = list(shape[-dims:])
    attrs = dict(weight=data(*normalized), bias=data(*normalized)) if affine else {}
    layer = build("nn.LayerNorm", backend, params=dict(normalized_shape=normalized, eps=1e-5,
                                                       elementwise_affine=affine), attrs=attrs, shapes=[shape])
    (y,) = run(layer, backend, x)
    assert close(y, layer_norm_by_definition(x, dims, 1e-5, attrs.get("weight"), attrs.get("bias")))


def test_the_functional_layer_norm_takes_its_weight_and_bias_as_inputs(backend):
    x, weight, bias = data(3, 4, 8), data(8), data(8)
    layer = build("F.layer_norm", backend, params=dict(normalized_shape=[8], eps=1e-3), shapes=[x.shape, (8,), (8,)],
                  names=["input", "weight", "bias"])
    (y,) = run(layer, backend, x, weight, bias)
    assert close(y, layer_norm_by_definition(x, 1, 1e-3, weight, bias))


def test_biased_variance_and_eps_inside_the_root(backend):
    """A row [0, 2]: mean 1, biased variance 1. With eps = 1, 1/sqrt(1 + 1); the unbiased variance would give
    1/sqrt(2 + 1) and eps outside the root 1/(1 + 1)."""
    row = np.array([[0.0, 2.0]], np.float32)
    for eps, want in ((1.0, 1 / math.sqrt(2)), (0.0, 1.0)):
        layer = build("nn.LayerNorm", backend, params=dict(normalized_shape=[2], eps=eps, elementwise_affine=False),
                      shapes=[row.shape])
        (y,) = run(layer, backend, row)
        np.testing.assert_allclose(y, [[-want, want]], rtol=1e-6)
    assert abs(1 / math.sqrt(2) - 1 / math.sqrt(3)) > 0.1 and abs(1 / math.sqrt(2) - 0.5) > 0.1


def test_layer_norm_keeps_its_digits_on_a_large_mean(backend):
    """Rows around 10000 with a spread of 1: two passes keep the variance, E[x^2] - E[x]^2 in float32 does not."""
    x = (10000 + RNG.standard_normal((6, 96))).astype(np.float32)
    layer = build("nn.LayerNorm", backend, params=dict(normalized_shape=[96], eps=1e-5, elementwise_affine=False),
                  shapes=[x.shape])
    (y,) = run(layer, backend, x)
    want = layer_norm_by_definition(x, 1, 1e-5)
    assert float(np.abs(y - want).max()) < 1e-2
    # the one-pass formula, for contrast: far off on the same rows (a negative variance gives NaN)
    mean = x.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        one_pass = (x - mean) / np.sqrt((x * x).mean(axis=1, keepdims=True) - mean * mean + 1e-5)
    assert not np.allclose(one_pass, want, atol=1e-2)


def attention_inputs(lead, length, keys, depth, value_depth):
    return data(*lead, length, depth), data(*lead, keys, depth), data(*lead, keys, value_depth)


def bool_mask(shape, empty_row=None):
    mask = RNG.random(shape) < 0.6
    mask[..., 0] = True          # every row keeps key 0 ...
    if empty_row is not None:    # ... except the row that keeps none
        mask[..., empty_row, :] = False
    return mask


def float_mask(shape):
    mask = data(*shape)
    mask[RNG.random(shape) < 0.3] = -np.inf
    mask[..., 0] = 0.5
    return mask


SDPA_CASES = {
    "no mask": dict(),
    "float mask (L, S)": dict(mask=lambda: float_mask((4, 6))),
    "float mask per head": dict(mask=lambda: float_mask((2, 3, 4, 6))),
    "float mask broadcast over heads": dict(mask=lambda: float_mask((2, 1, 4, 6))),
    "bool mask, True takes part": dict(mask=lambda: bool_mask((2, 3, 4, 6))),
    "bool mask with a row of no keys": dict(mask=lambda: bool_mask((4, 6), empty_row=2)),
    "causal": dict(causal=True),
    "scale": dict(scale=0.3),
}


@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_is_the_definition(backend, case):
    options = SDPA_CASES[case]
    q, k, v = attention_inputs((2, 3), 4, 6, 5, 7)
    inputs = [q, k, v]
    params = dict(dropout_p=0.0, is_causal=options.get("causal", False))
    if "scale" in options:
        params["scale"] = options["scale"]
    mask = options["mask"]() if "mask" in options else None
    names = ["query", "key", "value"]
    if mask is not None:
        inputs.append(mask)
        names.append("attn_mask")
    layer = build("F.scaled_dot_product_attention", backend, params=params, shapes=[x.shape for x in inputs],
                  names=names)
    (out,) = run(layer, backend, *inputs)
    want = sdpa_by_definition(q, k, v, mask=mask, causal=options.get("causal", False), scale=options.get("scale"))
    assert close(out, want)
    if case == "bool mask with a row of no keys":
        assert np.all(out[..., 2, :] == 0) and np.all(want[..., 2, :] == 0)


E, H = 8, 2


def mha_attrs(kdim=E, vdim=E):
    attrs = {"out_proj.weight": data(E, E, scale=0.4), "out_proj.bias": data(E), "in_proj_bias": data(3 * E)}
    if kdim == vdim == E:
        attrs["in_proj_weight"] = data(3 * E, E, scale=0.4)
    else:
        attrs |= {"q_proj_weight": data(E, E, scale=0.4), "k_proj_weight": data(E, kdim, scale=0.4),
                  "v_proj_weight": data(E, vdim, scale=0.4)}
    return attrs


MHA_CASES = {
    "self, no mask": dict(),
    "float mask (L, S)": dict(mask=lambda: float_mask((5, 5))),
    "float mask (N*H, L, S)": dict(mask=lambda: float_mask((3 * H, 5, 5))),
    "bool mask, True masked out": dict(mask=lambda: ~bool_mask((5, 5))),
    "bool mask with a row of no keys": dict(mask=lambda: ~bool_mask((3 * H, 5, 5), empty_row=1)),
    "(L, N, E) inputs": dict(batch_first=False),
    "unbatched (L, E)": dict(unbatched=True),
    "cross, kdim = vdim = 6": dict(kdim=6),
}


@pytest.mark.parametrize("case", MHA_CASES)
def test_mha_is_the_definition(backend, case):
    options = MHA_CASES[case]
    batch_first, kdim = options.get("batch_first", True), options.get("kdim", E)
    params = dict(embed_dim=E, num_heads=H, kdim=kdim, vdim=kdim, bias=True, add_bias_kv=False,
                  add_zero_attn=False, batch_first=batch_first)
    attrs = mha_attrs(kdim, kdim)
    n, length, keys = 3, 5, (7 if kdim != E else 5)
    if options.get("unbatched"):
        x = data(length, E)
    else:
        x = data(n, length, E) if batch_first else data(length, n, E)
    inputs, names = [x], ["input"]
    if kdim != E:
        inputs.append(data(n, keys, kdim))
        names = ["query", "key"]
    mask = options["mask"]() if "mask" in options else None
    if mask is not None:
        inputs.append(mask)
        names.append("attn_mask")
    layer = build("nn.MultiheadAttention", backend, params=params, attrs=attrs, shapes=[a.shape for a in inputs],
                  names=names)
    (out,) = run(layer, backend, *inputs)
    W = {key: value.astype(np.float64) for key, value in attrs.items()}
    memory = inputs[1] if kdim != E else x
    want = mha_by_definition(params, W, x, memory, memory, mask=mask)
    assert close(out, want)


def test_one_boolean_mask_means_opposite_things(backend):
    """One head, identity projections: MHA of x is SDPA of x with itself, once the boolean mask is inverted."""
    x = data(2, 5, 4)
    mask = bool_mask((5, 5))
    eye, zeros = np.eye(4, dtype=np.float32), np.zeros(12, np.float32)
    mha = build("nn.MultiheadAttention", backend, params=dict(embed_dim=4, num_heads=1, batch_first=True),
                attrs={"in_proj_weight": np.vstack([eye] * 3), "in_proj_bias": zeros, "out_proj.weight": eye,
                       "out_proj.bias": zeros[:4]}, shapes=[x.shape, mask.shape], names=["input", "attn_mask"])
    sdpa = build("F.scaled_dot_product_attention", backend, shapes=[x.shape] * 3 + [mask.shape])
    (by_mha,) = run(mha, backend, x, mask)
    assert close(by_mha, run(sdpa, backend, x, x, x, ~mask)[0], rtol=1e-5)
    assert not close(by_mha, run(sdpa, backend, x, x, x, mask)[0])
    assert close(by_mha, sdpa_by_definition(x, x, x, mask=~mask))


def test_causal_queries_never_see_later_keys(backend):
    q, k, v = attention_inputs((2, 2), 6, 6, 4, 3)
    layer = build("F.scaled_dot_product_attention", backend, params=dict(is_causal=True), shapes=[q.shape] * 3)
    (before,) = run(layer, backend, q, k, v)
    k2, v2 = k.copy(), v.copy()
    k2[..., 4:, :] += 3.0        # change keys and values 4 and 5
    v2[..., 4:, :] -= 2.0
    (after,) = run(layer, backend, q, k2, v2)
    np.testing.assert_allclose(after[..., :4, :], before[..., :4, :], rtol=1e-6, atol=1e-6)   # queries 0-3: blind
    assert not np.allclose(after[..., 4:, :], before[..., 4:, :], atol=1e-3)                  # 4 and 5 see them
    assert close(before, sdpa_by_definition(q, k, v, causal=True))


def test_the_fast_layers_cut_into_bands_give_the_same(monkeypatch):
    """The fast CPU layers on 3 threads, with the work per band made tiny so that every layer splits."""
    monkeypatch.setattr(threads, "MIN_MACS", 64)
    monkeypatch.setattr(fast_layer_norm, "PART_ELEMENTS", 16)
    fast = ("fast", None)
    threads.set_num_threads(3)
    try:
        x = data(4, 9, 16, scale=2.0)
        ln = build("nn.LayerNorm", fast, params=dict(normalized_shape=[16], eps=1e-5, elementwise_affine=False),
                   shapes=[x.shape])
        assert close(run(ln, fast, x)[0], layer_norm_by_definition(x, 1, 1e-5))
        q, k, v = attention_inputs((3, 4), 5, 6, 4, 3)
        mask = float_mask((3, 1, 5, 6))
        sdpa = build("F.scaled_dot_product_attention", fast, shapes=[q.shape, k.shape, v.shape, mask.shape])
        assert close(run(sdpa, fast, q, k, v, mask)[0], sdpa_by_definition(q, k, v, mask=mask))
        attrs = mha_attrs()
        tokens, heads_mask = data(3, 5, E), float_mask((3 * H, 5, 5))
        mha = build("nn.MultiheadAttention", fast, params=dict(embed_dim=E, num_heads=H, batch_first=True),
                    attrs=attrs, shapes=[tokens.shape, heads_mask.shape], names=["input", "attn_mask"])
        W = {key: value.astype(np.float64) for key, value in attrs.items()}
        assert close(run(mha, fast, tokens, heads_mask)[0],
                     mha_by_definition(dict(embed_dim=E, num_heads=H, batch_first=True), W, tokens, tokens, tokens,
                                       mask=heads_mask))
    finally:
        threads.set_num_threads(None)


def test_the_fast_layers_kept_buffers_hold_nothing_stale(monkeypatch):
    """The fast layers keep their work buffers between forwards (exercise 4): the same layer at one shape with
    new values, then at two shapes in turn, on 3 threads with tiny bands, still gives the definitions."""
    monkeypatch.setattr(threads, "MIN_MACS", 64)
    monkeypatch.setattr(fast_layer_norm, "PART_ELEMENTS", 16)
    fast = ("fast", None)
    params = dict(embed_dim=E, num_heads=H, batch_first=True)
    attrs = mha_attrs()
    W = {key: value.astype(np.float64) for key, value in attrs.items()}
    ln = build("nn.LayerNorm", fast, params=dict(normalized_shape=[16], eps=1e-5, elementwise_affine=False),
               shapes=[(4, 9, 16)])
    sdpa = build("F.scaled_dot_product_attention", fast, shapes=[(3, 4, 5, 4), (3, 4, 6, 4), (3, 4, 6, 3),
                                                                 (3, 1, 5, 6)])
    mha = build("nn.MultiheadAttention", fast, params=params, attrs=attrs, shapes=[(3, 5, E), (3 * H, 5, 5)],
                names=["input", "attn_mask"])
    threads.set_num_threads(3)
    try:
        for batch, length, keys in ((3, 5, 6), (3, 5, 6), (2, 7, 4), (3, 5, 6), (2, 7, 4)):
            x = data(batch, length, 16, scale=2.0)
            assert close(run(ln, fast, x)[0], layer_norm_by_definition(x, 1, 1e-5))
            q, k, v = attention_inputs((batch, 4), length, keys, 4, 3)
            mask = float_mask((batch, 1, length, keys))
            assert close(run(sdpa, fast, q, k, v, mask)[0], sdpa_by_definition(q, k, v, mask=mask))
            tokens, heads_mask = data(batch, length, E), float_mask((batch * H, length, length))
            assert close(run(mha, fast, tokens, heads_mask)[0],
                         mha_by_definition(params, W, tokens, tokens, tokens, mask=heads_mask))
    finally:
        threads.set_num_threads(None)


# ---- the models ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["numpy", "reference", *OPENCL])
def graph_backend(request):
    """(backend name, OpenCL device spec or None) for kuiper.load."""
    name = request.param
    return ("opencl", name.split(" ", 1)[1]) if name.startswith("opencl") else (name, None)


def load(name, graph_backend):
    backend, device = graph_backend
    return kuiper.load(PARAMS[name], backend=backend, device=device)


@pytest.mark.parametrize("model, case", [("vit_tiny", "b1"), ("swin_tiny", "b2"), ("attention_zoo", "b2"),
                                         ("convnext_tiny", "b2"), ("convnext_tiny", "b1")])
def test_the_models_match_pytorch(graph_backend, model, case):
    _, inputs, refs = model_case(model, case)
    outputs = load(model, graph_backend).forward(*inputs)
    assert len(outputs) == len(refs)
    for out, ref in zip(outputs, refs):
        assert close(out, ref), f"{model}/{case}: max |diff| {float(np.abs(out - ref).max()):.3g}"


def test_the_export_batch_is_written_into_the_files(graph_backend):
    vit, swin = load("vit_tiny", graph_backend), load("swin_tiny", graph_backend)
    vit.plan_for((1, 3, 32, 32))
    swin.plan_for((2, 3, 32, 32))
    with pytest.raises(InputError, match=r"torch\.cat_7.*cannot join \[\(1, 1, 32\), \(2, 16, 32\)\]"):
        vit.forward(np.zeros((2, 3, 32, 32), np.float32))
    with pytest.raises(InputError, match=r"Tensor\.reshape_78"):
        swin.forward(np.zeros((1, 3, 32, 32), np.float32))


def test_what_pnnx_wrote_for_the_transformer_operators():
    vit = read_pnnx(PARAMS["vit_tiny"])
    norms = [op for op in vit.operators if op.type == "nn.LayerNorm"]
    assert len(norms) == 5
    for op in norms:
        assert op.params["normalized_shape"].value == [32] and op.params["eps"].value == 1e-6
        assert op.params["elementwise_affine"].value is True
        assert {k: a.shape for k, a in op.attrs.items()} == {"weight": (32,), "bias": (32,)}
    attentions = [op for op in vit.operators if op.type == "nn.MultiheadAttention"]
    assert len(attentions) == 2
    for op in attentions:
        values = {k: p.value for k, p in op.params.items()}
        assert values["embed_dim"] == 32 and values["num_heads"] == 2 and values["batch_first"] is True
        assert {k: a.shape for k, a in op.attrs.items()} == {
            "in_proj_weight": (96, 32), "in_proj_bias": (96,), "out_proj.weight": (32, 32), "out_proj.bias": (32,)}
        assert len(op.inputs) == 1                                              # self-attention: one input

    zoo = {op.name: op for op in read_pnnx(PARAMS["attention_zoo"]).operators}
    assert zoo["self_attention"].input_names[1] == "attn_mask"
    assert {"q_proj_weight", "k_proj_weight", "v_proj_weight"} <= set(zoo["cross_attention"].attrs)
    assert zoo["cross_attention"].params["kdim"].value == 6
    sdpa = [op for op in zoo.values() if op.type == "F.scaled_dot_product_attention"]
    assert [op.input_names for op in sdpa] == [["query", "key", "value", "attn_mask"], ["query", "key", "value"]]
    assert [op.params["is_causal"].value for op in sdpa] == [False, True]
    assert zoo["norm"].params["normalized_shape"].value == [5, 8] and not zoo["norm"].attrs
    assert zoo["norm"].params["elementwise_affine"].value is False

    swin = read_pnnx(PARAMS["swin_tiny"])
    types = [op.type for op in swin.operators]
    assert types.count("nn.MultiheadAttention") == 3 and types.count("torch.matmul") == 2
    assert types.count("F.softmax") == 1
    producers = {out: op for op in swin.operators for out in op.outputs}
    for op in swin.operators:
        if op.type == "nn.MultiheadAttention":   # the position bias folded into a constant (N*H, L, S) mask
            mask = producers[op.inputs[op.input_names.index("attn_mask")]]
            windows = {16: 8, 32: 2}[op.params["embed_dim"].value]   # 2 images x 4 windows, then x 1 window
            assert mask.type == "pnnx.Attribute"
            assert mask.attrs["data"].shape == (windows * op.params["num_heads"].value, 16, 16)
    (scale,) = [op for op in swin.operators if op.type == "pnnx.Expression" and op.params["expr"].value.startswith("mul")]
    factor = float(re.fullmatch(r"mul\(@0,([\d.e-]+)\)", scale.params["expr"].value).group(1))
    assert factor == pytest.approx(1 / math.sqrt(16 // 2), rel=1e-7)     # 1/sqrt(head_dim), in float32


def test_every_param_line_quoted_in_the_notes_is_in_the_models():
    """Each line of the notes' ```text blocks that starts with an operator type must be in one of the four
    files, whitespace aside; ' ... ' in a quoted line stands for any text."""
    blocks = re.findall(r"^```text\n(.*?)^```", notes_text(20), re.S | re.M)
    quoted = [line for block in blocks for line in block.splitlines()
              if re.match(r"(nn|F|torch|Tensor|pnnx)\.\w", line)]
    assert len(quoted) >= 25
    files = [" ".join(tokens) for path in PARAMS.values() for tokens in param_lines(path)]
    for line in quoted:
        pieces = [" ".join(piece.split()) for piece in line.split("...") if piece.strip()]
        pattern = ".*".join(re.escape(piece) for piece in pieces)
        assert any(re.match(pattern, text) for text in files), f"not in any model: {line}"


@pytest.mark.skipif(not OPENCL_DEVICES, reason=NO_OPENCL)   # one command runs on OpenCL
def test_the_commands_in_the_notes(capsys):
    outputs = check_shell_commands(20, capsys)
    for command, out in outputs.items():
        if command.startswith("kuiper run"):
            assert "matches the saved PyTorch output" in out, command
    profile = outputs["kuiper run models/vit_tiny/vit_tiny.pnnx.param --backend opencl --profile"]
    assert "nn.MultiheadAttention" in profile and "nn.LayerNorm" in profile
    params = sum(math.prod(int(d) for d in re.search(r"=\(([\d,]+)\)", t).group(1).split(","))
                 for line in param_lines(PARAMS["swin_tiny"]) for t in line if t.startswith("@"))
    assert f"parameters: {params:,}" in outputs["kuiper inspect models/swin_tiny/swin_tiny.pnnx.param"]
