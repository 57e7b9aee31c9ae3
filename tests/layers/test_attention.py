"""nn.MultiheadAttention and F.scaled_dot_product_attention against loops over every batch item and head that
follow PyTorch's definitions in float64; every path (the fast CPU layers on 1-3 threads, OpenCL on every
device, its work-group softmax too) against the reference; every bad parameter or shape as a one-line error.

pnnx names the mask input ($attn_mask=...); `make_operator` leaves every name empty, so the `named` fixture
gives the operators of a test the names pnnx would write, and the shapes it records for the outputs."""

import math

import numpy as np
import pytest

from conftest import allocated_during, assert_every_path_matches_reference, assert_opencl_matches_numpy
from kuiper.cpu import threads
from kuiper.core.errors import LayerError, ShapeError
from kuiper.layers.multihead_attention import MultiheadAttention
from kuiper.runtime import backends
from kuiper.core import operators
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(5)
E, H = 8, 2


def data(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture
def named(monkeypatch):
    """named(input names, output shapes): what the operators made from now on carry, as pnnx writes them."""
    def use(names=(), output_shapes=()):
        make = operators.make_operator

        def make_named(*args, **kwargs):
            op = make(*args, **kwargs)
            op.input_names = list(names) or op.input_names
            for operand, shape in zip(op.output_operands, output_shapes):
                operand.shape = shape
            return op
        monkeypatch.setattr(operators, "make_operator", make_named)
        monkeypatch.setattr(backends, "make_operator", make_named)  # what make_layer calls
    return use


# ---- the definitions, one (batch item, head) at a time ---------------------------------------------------
def softmax(scores, empty_rows_zero):
    out = np.zeros_like(scores)
    for i, row in enumerate(scores):
        if np.all(row == -np.inf):
            out[i] = 0 if empty_rows_zero else np.nan
        else:
            e = np.exp(row - row.max())
            out[i] = e / e.sum()
    return out


def head_attention(q, k, v, scale, bias, empty_rows_zero=True):
    """softmax(q k^T * scale + bias) v for one head, and the weights."""
    weights = softmax(q @ k.T * scale + bias, empty_rows_zero)
    return weights @ v, weights


def mha_weights(kdim=E, vdim=E, bias=True, bias_kv=False):
    attrs = {"out_proj.weight": data(E, E, scale=0.3)}
    if kdim == vdim == E:
        attrs["in_proj_weight"] = data(3 * E, E, scale=0.3)
    else:
        attrs |= {"q_proj_weight": data(E, E, scale=0.3), "k_proj_weight": data(E, kdim, scale=0.3),
                  "v_proj_weight": data(E, vdim, scale=0.3)}
    if bias:
        attrs |= {"in_proj_bias": data(3 * E), "out_proj.bias": data(E)}
    if bias_kv:
        attrs |= {"bias_k": data(1, 1, E), "bias_v": data(1, 1, E)}
    return attrs


def mha_params(batch_first=True, kdim=E, vdim=E, bias=True, bias_kv=False, zero_attn=False):
    return dict(embed_dim=E, num_heads=H, kdim=kdim, vdim=vdim, batch_first=batch_first, bias=bias,
                add_bias_kv=bias_kv, add_zero_attn=zero_attn)


def expected_mha(attrs, query, key, value, mask=None, batch_first=True, zero_attn=False, weights_out=None):
    """PyTorch's MultiheadAttention, item by item and head by head (weights_out: None, "mean" or "heads")."""
    unbatched = query.ndim == 2
    q_all, k_all, v_all = (x[None] if unbatched else x if batch_first else x.transpose(1, 0, 2)
                           for x in (query, key, value))
    if "in_proj_weight" in attrs:
        wq, wk, wv = np.split(attrs["in_proj_weight"].astype(np.float64), 3)
    else:
        wq, wk, wv = (attrs[f"{c}_proj_weight"].astype(np.float64) for c in "qkv")
    bq, bk, bv = np.split(attrs["in_proj_bias"], 3) if "in_proj_bias" in attrs else (0, 0, 0)
    d = E // H
    outs, weights = [], []
    for n in range(q_all.shape[0]):
        q, k, v = q_all[n] @ wq.T + bq, k_all[n] @ wk.T + bk, v_all[n] @ wv.T + bv
        extra = 0
        if "bias_k" in attrs:
            k, v, extra = np.vstack([k, attrs["bias_k"][0]]), np.vstack([v, attrs["bias_v"][0]]), 1
        if zero_attn:
            k, v, extra = np.vstack([k, np.zeros(E)]), np.vstack([v, np.zeros(E)]), extra + 1
        heads, head_weights = [], []
        for h in range(H):
            bias = np.zeros((q.shape[0], k.shape[0]))
            if mask is not None:
                m = mask if mask.ndim == 2 else mask[n * H + h]
                keys = m.shape[-1]
                bias[:, :keys] = np.where(m, -np.inf, 0) if m.dtype == bool else m
            cols = slice(h * d, (h + 1) * d)
            out, w = head_attention(q[:, cols], k[:, cols], v[:, cols], 1 / math.sqrt(d), bias,
                                    empty_rows_zero=weights_out is None)
            heads.append(out)
            head_weights.append(w)
        joined = np.hstack(heads) @ attrs["out_proj.weight"].T + attrs.get("out_proj.bias", 0)
        outs.append(joined)
        weights.append(np.mean(head_weights, axis=0) if weights_out == "mean" else np.stack(head_weights))
    out = np.stack(outs)
    out = out[0] if unbatched else out if batch_first else out.transpose(1, 0, 2)
    weights = np.stack(weights)
    return out, (weights[0] if unbatched else weights)


# ---- MultiheadAttention: the reference ------------------------------------------------------------------
def run_mha(named, params, attrs, inputs, names=(), weights_shape=None):
    named(names, [inputs[0].shape] + ([weights_shape] if weights_shape else []))
    layer = make_layer("nn.MultiheadAttention", params=params, attrs=attrs, input_shapes=[x.shape for x in inputs],
                       num_outputs=2 if weights_shape else 1)
    return layer.run_numpy(*inputs)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
def test_self_attention(named, batch_first, batch):
    attrs = mha_weights()
    x = data(batch, 5, E) if batch_first else data(5, batch, E)
    (out,) = run_mha(named, mha_params(batch_first), attrs, [x])
    np.testing.assert_allclose(out, expected_mha(attrs, x, x, x, batch_first=batch_first)[0], rtol=1e-4, atol=1e-5)


def test_unbatched_input(named):
    attrs = mha_weights()
    x = data(6, E)
    (out,) = run_mha(named, mha_params(batch_first=False), attrs, [x])
    np.testing.assert_allclose(out, expected_mha(attrs, x, x, x)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kdim, vdim, bias", [(E, E, True), (4, 6, True), (3, 5, False), (E, E, False)])
def test_query_key_and_value_inputs(named, kdim, vdim, bias):
    attrs = mha_weights(kdim, vdim, bias)
    q, k, v = data(2, 5, E), data(2, 7, kdim), data(2, 7, vdim)
    (out,) = run_mha(named, mha_params(True, kdim, vdim, bias), attrs, [q, k, v])
    np.testing.assert_allclose(out, expected_mha(attrs, q, k, v)[0], rtol=1e-4, atol=1e-5)


def test_two_inputs_are_query_and_key_value(named):
    attrs = mha_weights()
    q, kv = data(7, 2, E), data(4, 2, E)
    (out,) = run_mha(named, mha_params(batch_first=False), attrs, [q, kv])
    np.testing.assert_allclose(out, expected_mha(attrs, q, kv, kv, batch_first=False)[0], rtol=1e-4, atol=1e-5)


def masks(batch, length, keys):
    """A float (L, S), a float (N*H, L, S) with -inf, a boolean (L, S) and a boolean (N*H, L, S) mask."""
    heavy = data(batch * H, length, keys)
    heavy[0, 1] = -np.inf  # every key of a row masked
    heavy[1, 0, :2] = -np.inf
    bools = RNG.random((batch * H, length, keys)) > 0.6
    bools[0, 0] = True
    return [data(length, keys), heavy, RNG.random((length, keys)) > 0.5, bools]


@pytest.mark.parametrize("which", range(4), ids=["float-2d", "float-3d", "bool-2d", "bool-3d"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_masks(named, which, batch_first):
    attrs = mha_weights()
    x = data(2, 5, E) if batch_first else data(5, 2, E)
    mask = masks(2, 5, 5)[which]
    (out,) = run_mha(named, mha_params(batch_first), attrs, [x, mask], names=("input", "attn_mask"))
    np.testing.assert_allclose(out, expected_mha(attrs, x, x, x, mask, batch_first)[0], rtol=1e-4, atol=1e-5)


def test_a_row_with_every_key_masked_gives_zeros_without_weights_and_nan_with_them(named):
    attrs = mha_weights()
    x, mask = data(1, 3, E), np.zeros((3, 3), np.float32)
    mask[1] = -np.inf
    (out,) = run_mha(named, mha_params(), attrs, [x, mask], names=("input", "attn_mask"))
    np.testing.assert_array_equal(out[0, 1], attrs["out_proj.bias"])  # the heads gave zeros
    out, weights = run_mha(named, mha_params(), attrs, [x, mask], names=("input", "attn_mask"), weights_shape=(1, 3, 3))
    assert np.isnan(out[0, 1]).all() and np.isnan(weights[0, 1]).all() and not np.isnan(out[0, [0, 2]]).any()


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("unbatched", [False, True])
def test_the_weights_output(named, average, unbatched):
    attrs = mha_weights()
    x = data(5, E) if unbatched else data(2, 5, E)
    lead = (() if unbatched else (2,)) + (() if average else (H,))
    out, weights = run_mha(named, mha_params(), attrs, [x], weights_shape=lead + (5, 5))
    expected, expected_weights = expected_mha(attrs, x, x, x, weights_out="mean" if average else "heads")
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bias_kv, zero_attn", [(True, False), (False, True), (True, True)])
def test_extra_keys(named, bias_kv, zero_attn):
    attrs = mha_weights(bias_kv=bias_kv)
    x, mask = data(5, 2, E), masks(2, 5, 5)[1]
    params = mha_params(False, bias_kv=bias_kv, zero_attn=zero_attn)
    extra = bias_kv + zero_attn
    out, weights = run_mha(named, params, attrs, [x, mask], names=("input", "attn_mask"),
                           weights_shape=(2, H, 5, 5 + extra))
    expected, expected_weights = expected_mha(attrs, x, x, x, mask, False, zero_attn, weights_out="heads")
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-4, atol=1e-6)


# ---- MultiheadAttention: every path ----------------------------------------------------------------------
@pytest.mark.parametrize("case", ["self", "seq-first", "cross-kdim", "mask-3d", "bool-2d", "extras", "weights",
                                  "unbatched-heads", "vit", "vit-seq-first", "swin"])
def test_mha_every_path(named, case):
    params, attrs, names, weights = mha_params(), mha_weights(), (), None
    x = data(3, 5, E)
    inputs = [x]
    if case == "seq-first":
        params, inputs = mha_params(False), [data(5, 3, E)]
    elif case == "cross-kdim":
        params, attrs = mha_params(False, 4, 6, bias=False), mha_weights(4, 6, bias=False)
        inputs = [data(5, 3, E), data(7, 3, 4), data(7, 3, 6)]
    elif case in ("mask-3d", "bool-2d"):
        inputs, names = [x, masks(3, 5, 5)[1 if case == "mask-3d" else 2]], ("input", "attn_mask")
    elif case == "extras":
        params, attrs = mha_params(False, bias_kv=True, zero_attn=True), mha_weights(bias_kv=True)
        inputs, names, weights = [data(5, 3, E), masks(3, 5, 5)[0]], ("", "attn_mask"), (3, 5, 7)
    elif case == "weights":
        inputs, names, weights = [x, masks(3, 5, 5)[3]], ("input", "attn_mask"), (3, H, 5, 5)
    elif case == "unbatched-heads":
        params, inputs, weights = mha_params(False), [data(5, E)], (H, 5, 5)
    elif case == "vit":
        params = dict(mha_params(), embed_dim=96, num_heads=12, kdim=96, vdim=96)
        attrs = {"in_proj_weight": data(288, 96, scale=0.1), "in_proj_bias": data(288),
                 "out_proj.weight": data(96, 96, scale=0.1), "out_proj.bias": data(96)}
        inputs = [data(1, 197, 96)]
    elif case == "vit-seq-first":  # on CPUs the weights in panels, times the batch's items (ConstantB)
        params = dict(mha_params(False), embed_dim=64, num_heads=4, kdim=64, vdim=64)
        attrs = {"in_proj_weight": data(192, 64, scale=0.1), "in_proj_bias": data(192),
                 "out_proj.weight": data(64, 64, scale=0.1), "out_proj.bias": data(64)}
        inputs = [data(9, 3, 64)]
    elif case == "swin":
        inputs, names = [data(16, 49, E), data(16 * H, 49, 49)], ("input", "attn_mask")
    named(names, [inputs[0].shape] + ([weights] if weights else []))
    checked = assert_every_path_matches_reference("nn.MultiheadAttention", *inputs, params=params, attrs=attrs,
                                                  num_outputs=2 if weights else 1)
    assert checked == ["forward_numpy"]


# ---- scaled_dot_product_attention ------------------------------------------------------------------------
def expected_sdpa(q, k, v, mask=None, causal=False, scale=None):
    """PyTorch's definition, one product of the leading dims at a time; grouped query heads share key heads."""
    lead = q.shape[:-2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = np.empty(lead + (q.shape[-2], v.shape[-1]))
    bias = np.zeros(q.shape[:-1] + k.shape[-2:-1])
    if mask is not None:
        bias += np.where(mask, 0, -np.inf) if mask.dtype == bool else mask
    if causal:
        bias += np.where(np.tril(np.ones(bias.shape[-2:], bool)), 0, -np.inf)
    groups = q.shape[-3] // k.shape[-3] if q.ndim > 2 else 1
    for index in np.ndindex(lead):
        kv_index = index[:-1] + (index[-1] // groups,) if index else index
        out[index] = head_attention(q[index].astype(np.float64), k[kv_index], v[kv_index], scale, bias[index])[0]
    return out


def sdpa(inputs, **params):
    params = {"dropout_p": 0.0, "is_causal": False} | params | ({} if len(inputs) == 4 else {"attn_mask": None})
    return make_layer("F.scaled_dot_product_attention", params=params, input_shapes=[x.shape for x in inputs])


QKV = (data(2, 3, 5, 4), data(2, 3, 7, 4), data(2, 3, 7, 6))


@pytest.mark.parametrize("mask", [None, data(5, 7), data(2, 1, 5, 7), data(3, 1, 7), data(2, 1, 5, 1),
                                  RNG.random((5, 7)) > 0.4, RNG.random((2, 3, 5, 7)) > 0.5],
                         ids=["none", "float-2d", "float-bcast", "float-bcast-keys", "float-bcast-rows", "bool-2d",
                              "bool-4d"])
def test_sdpa_masks(mask):
    inputs = [*QKV] + ([] if mask is None else [mask])
    (out,) = sdpa(inputs).run_numpy(*inputs)
    np.testing.assert_allclose(out, expected_sdpa(*inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("length", [3, 7, 9])
def test_sdpa_causal_keeps_the_keys_up_to_the_query(length):
    q, k, v = data(3, length, 4), QKV[1][0], QKV[2][0]
    (out,) = sdpa([q, k, v], is_causal=True).run_numpy(q, k, v)
    np.testing.assert_allclose(out, expected_sdpa(q, k, v, causal=True), rtol=1e-4, atol=1e-5)


def test_sdpa_scale_and_rank():
    for q, k, v in ((QKV[0][0, 0], QKV[1][0, 0], QKV[2][0, 0]), (data(2, 2, 3, 5, 4), data(2, 2, 3, 7, 4),
                                                                data(2, 2, 3, 7, 6))):
        (out,) = sdpa([q, k, v], scale=0.3).run_numpy(q, k, v)
        np.testing.assert_allclose(out, expected_sdpa(q, k, v, scale=0.3), rtol=1e-4, atol=1e-5)


def test_sdpa_grouped_query_heads_share_key_heads():
    q, k, v, mask = data(2, 6, 5, 4), data(2, 2, 7, 4), data(2, 2, 7, 3), data(6, 5, 7)
    (out,) = sdpa([q, k, v, mask], enable_gqa=True).run_numpy(q, k, v, mask)
    np.testing.assert_allclose(out, expected_sdpa(q, k, v, mask), rtol=1e-4, atol=1e-5)


def test_sdpa_broadcasts_a_single_key_head_without_enable_gqa():
    # multi-query attention as timm's MobileNetV4 hybrids call it: key and value of one head
    q, k, v = data(2, 4, 5, 4), data(2, 1, 7, 4), data(2, 1, 7, 3)
    (out,) = sdpa([q, k, v]).run_numpy(q, k, v)
    np.testing.assert_allclose(out, expected_sdpa(q, k, v), rtol=1e-4, atol=1e-5)


def test_sdpa_row_with_every_key_masked_gives_zeros():
    mask = np.ones((5, 7), bool)
    mask[2] = False
    (out,) = sdpa([*QKV, mask]).run_numpy(*QKV, mask)
    assert not out[:, :, 2].any() and np.isfinite(out).all()


@pytest.mark.parametrize("case", ["plain", "mask", "bool", "causal", "gqa", "mqa", "2d", "mask-host"])
def test_sdpa_every_path(case):
    inputs, params = list(QKV), {}
    if case == "mask":
        inputs.append(data(2, 1, 5, 7))
    elif case == "bool":
        inputs.append(RNG.random((3, 5, 7)) > 0.5)
    elif case == "causal":
        params = dict(is_causal=True)
    elif case == "gqa":
        inputs, params = [data(2, 6, 5, 4), data(2, 3, 7, 4), data(2, 3, 7, 6)], dict(enable_gqa=True)
    elif case == "mqa":
        inputs = [data(2, 6, 5, 4), data(2, 1, 7, 4), data(2, 1, 7, 6)]
    elif case == "2d":
        inputs = [t[0, 0] for t in QKV]
    elif case == "mask-host":  # broadcast over every other leading dim: too many for the kernel, run on the host
        inputs = [data(2, 2, 2, 2, 5, 4), data(2, 2, 2, 2, 7, 4), data(2, 2, 2, 2, 7, 6), data(2, 1, 2, 1, 5, 7)]
    params = {"dropout_p": 0.0, "is_causal": False} | params | ({} if len(inputs) == 4 else {"attn_mask": None})
    checked = assert_every_path_matches_reference("F.scaled_dot_product_attention", *inputs, params=params)
    assert checked == ["forward_numpy"]


@pytest.mark.parametrize("case", ["mha", "sdpa-bool", "sdpa-long"])
def test_work_group_softmax_on_every_device(cl_runtime, monkeypatch, named, case):
    """Posing as a GPU, the device runs attention's softmax with work-groups wider than one work-item."""
    monkeypatch.setattr(cl_runtime, "is_cpu", False)
    if case == "mha":
        x, mask = data(2, 5, E), masks(2, 5, 5)[1]
        named(("input", "attn_mask"), [x.shape, (2, 5, 5)])
        layer = make_layer("nn.MultiheadAttention", params=mha_params(), attrs=mha_weights(),
                           input_shapes=[x.shape, mask.shape], num_outputs=2)
        inputs = [x, mask]
    else:
        keys = 7 if case == "sdpa-bool" else 300
        inputs = [QKV[0], data(2, 3, keys, 4), data(2, 3, keys, 6), RNG.random((5, keys)) > 0.5]
        layer = sdpa(inputs)
    with np.errstate(invalid="ignore"):
        assert_opencl_matches_numpy(layer, cl_runtime, *inputs)


# ---- the fast layers' work buffers, kept between forwards ---------------------------------------------------
def kept_bytes(layer):
    """What a fast layer holds between forwards: its Scratch's buffers (kuiper/cpu/scratch.py)."""
    return sum(buffer.nbytes for buffer in layer.scratch._buffers.values())


def assert_buffers_hold_nothing_stale(monkeypatch, count, type, runs, **options):
    """The fast layer run on each inputs of `runs` in turn (same shapes with new values, other shapes, back)
    matches the reference each time, and keeps what its workspace_bytes says; bands and items made small
    enough that `count` threads each write their own part of the kept buffers."""
    monkeypatch.setattr(threads, "MIN_MACS", 64)
    fast = make_layer(type, backend="numpy", input_shapes=[x.shape for x in runs[0]], **options)
    reference = make_layer(type, input_shapes=[x.shape for x in runs[0]], **options)
    assert fast.keeps_workspace
    for operand, x in zip(fast.op.input_operands, runs[0]):  # as pnnx records them: a boolean mask's copy is counted
        operand.dtype = "bool" if x.dtype == np.bool_ else "f32"
    threads.set_num_threads(count)
    try:
        for i, inputs in enumerate(runs):
            with threads.active():
                got = fast.run_numpy(*inputs)
            for g, want in zip(got, reference.run_numpy(*inputs), strict=True):
                np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5, err_msg=f"run {i}")
            assert kept_bytes(fast) == fast.workspace_bytes([x.shape for x in inputs]), f"run {i}"
    finally:
        threads.set_num_threads(None)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("case", ["float-3d", "bool-extras-heads", "cross-averaged"])
def test_fast_mha_buffers_hold_nothing_stale(named, monkeypatch, count, case):
    """Two calls at a shape with different values, then two shapes in turn: a buffer kept from the last call
    that a forward read before writing, or a band that wrote outside its part, would show."""
    params, attrs, names, weights = mha_params(), mha_weights(), ("input", "attn_mask"), None
    if case == "float-3d":
        def inputs(n, length):
            return [data(n, length, E), masks(n, length, length)[1]]
    elif case == "bool-extras-heads":  # the scores written straight into the weights output, extra keys padded
        params, attrs = mha_params(False, bias_kv=True, zero_attn=True), mha_weights(bias_kv=True)
        weights = (3, H, 5, 7)

        def inputs(n, length):
            return [data(length, n, E), masks(n, length, length)[2]]
    else:
        params, attrs, names, weights = mha_params(False, 4, 6), mha_weights(4, 6), (), (3, 5, 6)

        def inputs(n, length):
            return [data(length, n, E), data(length + 1, n, 4), data(length + 1, n, 6)]
    runs = [inputs(3, 5), inputs(3, 5), inputs(2, 7), inputs(3, 5), inputs(2, 7)]
    named(names if len(runs[0]) == 2 else (), [runs[0][0].shape] + ([weights] if weights else []))
    assert_buffers_hold_nothing_stale(monkeypatch, count, "nn.MultiheadAttention", runs, params=params, attrs=attrs,
                                      num_outputs=2 if weights else 1)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("case", ["mask", "bool", "causal", "gqa"])
def test_fast_sdpa_buffers_hold_nothing_stale(monkeypatch, count, case):
    """As for MHA; the masks' shapes switch between one that must be copied to the stack's layout and one that
    is a view of it, so that the set of kept buffers changes too."""
    params = {"dropout_p": 0.0, "is_causal": case == "causal"}

    def inputs(length, keys, first):
        heads = 6 if case == "gqa" else 3
        q, k, v = data(2, heads, length, 4), data(2, 3, keys, 4), data(2, 3, keys, 6)
        if case == "mask":
            return [q, k, v, data(2, 1, length, keys) if first else data(1, length, keys)]
        if case == "bool":
            return [q, k, v, RNG.random((heads, length, keys)) > 0.5]
        return [q, k, v]
    runs = [inputs(5, 7, True), inputs(5, 7, True), inputs(6, 4, False), inputs(5, 7, True), inputs(6, 4, False)]
    if len(runs[0]) == 3:
        params["attn_mask"] = None
    if case == "gqa":
        params["enable_gqa"] = True
    assert_buffers_hold_nothing_stale(monkeypatch, count, "F.scaled_dot_product_attention", runs, params=params)


def test_fast_layers_write_outputs_given_as_strided_views(named):
    """The graph hands layers contiguous outputs, which the fast layers write through reshaped views of; outputs
    given by hand as strided views get the same values (written after, from the layer's own arrays)."""
    q, k, v = QKV
    sdpa_layer = make_layer("F.scaled_dot_product_attention", backend="numpy", params={"dropout_p": 0.0, "is_causal": False,
                                                                               "attn_mask": None},
                            input_shapes=[q.shape, k.shape, v.shape])
    x = data(2, 5, E)
    named((), [x.shape, (2, H, 5, 5)])
    mha = make_layer("nn.MultiheadAttention", backend="numpy", params=mha_params(), attrs=mha_weights(),
                     input_shapes=[x.shape], num_outputs=2)
    for layer, inputs in ((sdpa_layer, [q, k, v]), (mha, [x])):
        expected = layer.run_numpy(*inputs)
        wide = [np.zeros(e.shape[:-1] + (2 * e.shape[-1],), np.float32) for e in expected]
        layer.forward_numpy(inputs, [w[..., ::2] for w in wide])
        for w, e in zip(wide, expected):
            np.testing.assert_array_equal(w[..., ::2], e)
            assert not w[..., 1::2].any()


def test_fast_layers_take_an_empty_batch():
    """Batch 0: every buffer and view is empty, and the output too."""
    q, k, v = data(0, 6, 5, 4), data(0, 3, 7, 4), data(0, 3, 7, 6)
    grouped = make_layer("F.scaled_dot_product_attention", backend="numpy", input_shapes=[q.shape, k.shape, v.shape],
                         params={"dropout_p": 0.0, "is_causal": False, "attn_mask": None, "enable_gqa": True})
    assert grouped.run_numpy(q, k, v)[0].shape == (0, 6, 5, 6)
    mha = make_layer("nn.MultiheadAttention", backend="numpy", params=mha_params(), attrs=mha_weights(),
                     input_shapes=[(0, 5, E)])
    assert mha.run_numpy(data(0, 5, E))[0].shape == (0, 5, E)


def test_a_second_forward_allocates_no_large_array(named):
    """Issue #16: at Swin-T's first-stage shape the fast MHA made about 14 MB of new arrays a call, and their
    page faults took longer than its arithmetic. A second forward now allocates under 64 KiB (numpy's
    element-wise loops take a 32 KiB buffer of their own), 1.2 MB being the size of one activation."""
    attrs = {"in_proj_weight": data(288, 96, scale=0.1), "in_proj_bias": data(288),
             "out_proj.weight": data(96, 96, scale=0.1), "out_proj.bias": data(96)}
    x, mask = data(64, 49, 96), data(192, 49, 49)
    q, k, v = data(64, 3, 49, 32), data(64, 3, 49, 32), data(64, 3, 49, 32)
    sdpa_inputs = [q, k, v, mask.reshape(64, 3, 49, 49)]
    sdpa_layer = make_layer("F.scaled_dot_product_attention", backend="numpy", params={"dropout_p": 0.0, "is_causal": False},
                            input_shapes=[a.shape for a in sdpa_inputs])
    named(("input", "attn_mask"), [x.shape])
    params = dict(mha_params(), embed_dim=96, num_heads=3, kdim=96, vdim=96)
    mha = make_layer("nn.MultiheadAttention", backend="numpy", params=params, attrs=attrs,
                     input_shapes=[x.shape, mask.shape])
    for layer, inputs in ((mha, [x, mask]), (sdpa_layer, sdpa_inputs)):
        outputs = [np.empty(x.shape if layer is mha else q.shape, np.float32)]
        threads.set_num_threads(1)
        try:
            with threads.active():
                layer.forward_numpy(inputs, outputs)
                assert allocated_during(lambda: layer.forward_numpy(inputs, outputs)) < 64 << 10
        finally:
            threads.set_num_threads(None)
        layer.op.input_operands[-1].dtype = "f32"
        assert kept_bytes(layer) == layer.workspace_bytes([a.shape for a in inputs])


# ---- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params, attrs, shapes, names, message", [
    (dict(mha_params(), num_heads=3), mha_weights(), [(1, 2, E)], (), "embed_dim=8 must be a positive multiple"),
    (mha_params(kdim=4), mha_weights(), [(1, 2, E)], (), "in_proj_weight needs kdim=4"),
    (mha_params(), mha_weights(bias=False), [(1, 2, E)], (), "missing weight '@in_proj_bias'"),
    (mha_params(bias_kv=True), mha_weights(), [(1, 2, E)], (), "missing weight '@bias_k'"),
    (mha_params(), mha_weights(), [(1, 2, E)] * 4, (), r"expects query\[, key\[, value\]\]"),
    (mha_params(), mha_weights(), [(1, 2, E), (2, 2)], ("input", "key_padding_mask"),
     r"input\(s\) \$key_padding_mask not supported"),
    (dict(mha_params(), dropout=0.1), mha_weights(), [(1, 2, E)], (), r"unknown parameter\(s\) dropout"),
])
def test_mha_bad_parameters(named, params, attrs, shapes, names, message):
    named(names)
    with pytest.raises(LayerError, match=message) as info:
        make_layer("nn.MultiheadAttention", params=params, attrs=attrs, input_shapes=shapes)
    assert "nn.MultiheadAttention" in str(info.value) and "\n" not in str(info.value)


def test_mha_refuses_what_pnnx_gets_wrong():
    op = operators.make_operator("nn.MultiheadAttention", params=mha_params(), attrs=mha_weights(),
                                 input_shapes=[(5, 5), (1, 5, E)])
    op.input_names = ["", "attn_mask"]
    op.input_operands[0].dtype, op.input_operands[1].dtype = "bool", "f32"  # a bool mask, swapped by pnnx
    with pytest.raises(LayerError, match="the query is bool: pnnx 20261020 swaps"):
        MultiheadAttention(op)
    op = operators.make_operator("nn.MultiheadAttention", params=mha_params(), attrs=mha_weights(),
                                 input_shapes=[(1, 5, E)], num_outputs=2)
    with pytest.raises(LayerError, match="cannot tell whether the attention weights output is averaged"):
        MultiheadAttention(op)


@pytest.mark.parametrize("shapes, names, message", [
    ([(2, 5, 7)], (), r"query must be \(N, L, 8\) or unbatched \(L, 8\), as many dims as the query, got \(2, 5, 7\)"),
    ([(2, 5, E), (2, 6, E), (2, 7, E)], (), "disagree on the batch or on the key count"),
    ([(2, 5, E), (3, 6, E)], (), "disagree on the batch"),
    ([(2, 5, E), (2, 0, E)], (), "has no positions to attend to"),
    ([(2, 5, E), (5, 6)], ("", "attn_mask"), r"attn_mask must be \(L, S\) = \(5, 5\) or \(N\*num_heads, L, S\) = "
                                             r"\(4, 5, 5\), got \(5, 6\)"),
    ([(5, E), (4, 5, 5)], ("", "attn_mask"), r"\(N\*num_heads, L, S\) = \(2, 5, 5\)"),
])
def test_mha_bad_shapes(named, shapes, names, message):
    named(names)
    layer = make_layer("nn.MultiheadAttention", params=mha_params(), attrs=mha_weights(), input_shapes=shapes)
    with pytest.raises(ShapeError, match=message) as info:
        layer.output_shapes(shapes)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("params, count, message", [
    (dict(dropout_p=0.1), 3, "dropout_p=0.1 drops attention weights at random"),
    (dict(is_causal=True), 4, "is_causal=True and an attn_mask cannot both be given"),
    (dict(attn_mask=1), 3, "'attn_mask' must be None or an input"),
    (dict(scale=float("inf")), 3, "'scale' must be finite"),
    ({}, 2, "expects at least 3 input"),
    ({}, 5, "expects inputs query, key, value and an optional attn_mask"),
])
def test_sdpa_bad_parameters(params, count, message):
    shapes = [(2, 5, 4)] * count
    with pytest.raises(LayerError, match=message) as info:
        make_layer("F.scaled_dot_product_attention", params={"dropout_p": 0.0} | params, input_shapes=shapes)
    assert "F.scaled_dot_product_attention" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("shapes, params, message", [
    ([(2, 5, 4), (2, 7, 3), (2, 7, 6)], {}, r"expects query \(..., L, E\), key \(..., S, E\)"),
    ([(2, 5, 4), (2, 7, 4), (2, 6, 6)], {}, r"expects query \(..., L, E\)"),
    ([(2, 5, 4), (3, 7, 4), (3, 7, 6)], {}, "must have the same leading dims"),
    ([(2, 4, 5, 4), (2, 2, 7, 4), (2, 2, 7, 6)], {}, "must have the same leading dims$"),
    ([(2, 4, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)], dict(enable_gqa=True), "query heads a multiple of key heads"),
    ([(2, 5, 4), (2, 0, 4), (2, 0, 6)], {}, "has no positions to attend to"),
    ([(2, 5, 4), (2, 7, 4), (2, 7, 6), (5, 6)], {}, r"attn_mask \(5, 6\) does not broadcast to the scores \(2, 5, 7\)"),
    ([(2, 5, 4), (2, 7, 4), (2, 7, 6), (1, 2, 5, 7)], {}, "does not broadcast"),
])
def test_sdpa_bad_shapes(shapes, params, message):
    layer = make_layer("F.scaled_dot_product_attention", params={"dropout_p": 0.0} | params, input_shapes=shapes)
    with pytest.raises(ShapeError, match=message) as info:
        layer.output_shapes(shapes)
    assert "\n" not in str(info.value)
