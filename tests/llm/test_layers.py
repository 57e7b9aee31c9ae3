"""The language-model layers against references written here independently: the embedding as a loop over ids,
RMSNorm by its formula in float64, the rotary embedding as complex multiplication, the cached attention as a
loop over heads and positions on the whole sequence at once; then every path against the reference layer
(assert_every_path_matches_reference), and every bad parameter, shape or input as a one-line kuiper error."""

import cmath
import math

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference
from llm_tools import llama3_frequency
from kuiper.core.errors import InputError, LayerError, ShapeError
from kuiper.layers.rotary import inverse_frequencies
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(40)


def data(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# ---- nn.Embedding, F.embedding -----------------------------------------------------------------------------
def embedding(vocab=11, dim=6, ids_shape=(2, 5)):
    table = data(vocab, dim)
    layer = make_layer("nn.Embedding", params=dict(num_embeddings=vocab, embedding_dim=dim, sparse=False),
                       attrs=dict(weight=table), input_shapes=[ids_shape])
    return layer, table


@pytest.mark.parametrize("ids_shape", [(7,), (2, 5), (1, 3, 4)])
def test_embedding_copies_the_rows_of_the_ids(ids_shape):
    layer, table = embedding(ids_shape=ids_shape)
    ids = RNG.integers(0, 11, ids_shape)
    (out,) = layer.run_numpy(ids)
    assert out.shape == ids_shape + (6,) and out.dtype == np.float32
    for index in np.ndindex(ids_shape):
        np.testing.assert_array_equal(out[index], table[ids[index]])


def test_functional_embedding_takes_its_table_as_an_input():
    table, ids = data(9, 4), RNG.integers(0, 9, (3, 2))
    layer = make_layer("F.embedding", params=dict(scale_grad_by_freq=False, sparse=False),
                       input_shapes=[ids.shape, table.shape])
    np.testing.assert_array_equal(layer.run_numpy(ids, table)[0], table[ids])


@pytest.mark.parametrize("bad", [11, 40, -1])
def test_an_id_out_of_range_is_the_callers_error_naming_the_operator(bad):
    layer, _ = embedding()
    with pytest.raises(InputError, match=f"nn.Embedding operator 'op': id {bad} is out of range.*11 rows"):
        layer.run_numpy(np.array([[0, bad, 3]]))


def test_embedding_refuses_float_ids_and_bad_tables():
    layer, _ = embedding()
    with pytest.raises(ShapeError, match="expects integer ids, got float32"):
        layer.run_numpy(np.zeros((1, 2), np.float32))
    with pytest.raises(LayerError, match=r"weight '@weight' has shape \(11, 6\), expected \(12, 6\)"):
        make_layer("nn.Embedding", params=dict(num_embeddings=12, embedding_dim=6), attrs=dict(weight=data(11, 6)))
    with pytest.raises(LayerError, match="must be >= 1"):
        make_layer("nn.Embedding", params=dict(num_embeddings=0, embedding_dim=6), attrs=dict(weight=data(0, 6)))


def test_embedding_every_path():
    assert_every_path_matches_reference("nn.Embedding", RNG.integers(0, 50, (2, 9)),
                                        params=dict(num_embeddings=50, embedding_dim=16),
                                        attrs=dict(weight=data(50, 16)))


# ---- nn.RMSNorm, F.rms_norm -------------------------------------------------------------------------------
def expected_rms_norm(x, dims, eps, weight=None):
    out = np.empty(x.shape, np.float64)
    for index in np.ndindex(x.shape[:x.ndim - dims]):
        row = x[index].astype(np.float64)
        out[index] = row / math.sqrt((row ** 2).sum() / row.size + eps)
    return out if weight is None else out * weight


@pytest.mark.parametrize("x_shape, shape", [((2, 5, 8), (8,)), ((3, 4, 6), (4, 6)), ((7,), (7,))])
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_matches_the_definition(x_shape, shape, with_weight):
    weight = data(*shape)
    attrs = dict(weight=weight) if with_weight else {}
    # pnnx writes elementwise_affine=False even with a weight: the attribute decides
    layer = make_layer("nn.RMSNorm", params=dict(normalized_shape=list(shape), eps=1e-5, elementwise_affine=False),
                       attrs=attrs, input_shapes=[x_shape])
    x = data(*x_shape, scale=3)
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected_rms_norm(x, len(shape), 1e-5, attrs.get("weight")),
                               rtol=1e-5, atol=1e-5)


def test_rms_norm_without_eps_uses_float32s_machine_epsilon():
    layer = make_layer("nn.RMSNorm", params=dict(normalized_shape=[4], eps=None), input_shapes=[(1, 4)])
    x = np.full((1, 4), 1e-4, np.float32)
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected_rms_norm(x, 1, np.finfo(np.float32).eps), rtol=1e-5)


@pytest.mark.parametrize("with_weight", [True, False])
def test_functional_rms_norm(with_weight):
    x, weight = data(2, 3, 5), data(5)
    params = dict(normalized_shape=[5], eps=1e-6) | ({} if with_weight else {"weight": None})
    inputs = [x, weight] if with_weight else [x]
    layer = make_layer("F.rms_norm", params=params, input_shapes=[a.shape for a in inputs])
    np.testing.assert_allclose(layer.run_numpy(*inputs)[0],
                               expected_rms_norm(x, 1, 1e-6, weight if with_weight else None), rtol=1e-5, atol=1e-5)


def test_rms_norm_refuses_what_does_not_fit():
    with pytest.raises(LayerError, match="normalized_shape=.* must be one or more sizes >= 1"):
        make_layer("nn.RMSNorm", params=dict(normalized_shape=[0]))
    with pytest.raises(LayerError, match=r"weight '@weight' has shape \(5,\), expected \(4,\)"):
        make_layer("nn.RMSNorm", params=dict(normalized_shape=[4]), attrs=dict(weight=data(5)))
    layer = make_layer("nn.RMSNorm", params=dict(normalized_shape=[4], eps=1e-6), input_shapes=[(2, 5)])
    with pytest.raises(ShapeError, match="must end the input's shape"):
        layer.run_numpy(data(2, 5))
    layer = make_layer("F.rms_norm", params=dict(normalized_shape=[5], eps=1e-6), input_shapes=[(2, 5), (4,)])
    with pytest.raises(ShapeError, match=r"weight must have shape \(5,\), got \(4,\)"):
        layer.run_numpy(data(2, 5), data(4))


def test_rms_norm_every_path():
    assert_every_path_matches_reference("nn.RMSNorm", data(1, 7, 64, scale=4),
                                        params=dict(normalized_shape=[64], eps=1e-6, elementwise_affine=False),
                                        attrs=dict(weight=data(64)))
    assert_every_path_matches_reference("F.rms_norm", data(3, 32), data(32),
                                        params=dict(normalized_shape=[32], eps=1e-5))


# ---- kuiper.RotaryEmbedding ----------------------------------------------------------------------------------
def rotary(head_dim=8, **params):
    return make_layer("kuiper.RotaryEmbedding", params=dict(head_dim=head_dim, **params),
                      input_shapes=[(1, 2, 3, head_dim), (3,)])


def expected_rotary(x, positions, inv_freq):
    """Coordinate pair (i, i + h) as the complex number x_i + j x_{i+h}, turned by e^{j p inv_freq[i]}."""
    out = np.empty(x.shape, np.float64)
    half = x.shape[-1] // 2
    for b, h, s in np.ndindex(x.shape[:3]):
        for i in range(half):
            turned = complex(x[b, h, s, i], x[b, h, s, i + half]) * cmath.exp(1j * positions[s] * inv_freq[i])
            out[b, h, s, i], out[b, h, s, i + half] = turned.real, turned.imag
    return out


def test_inverse_frequencies_of_each_rope_type():
    dim, theta = 64, 500000.0
    plain = [theta ** (-2 * i / dim) for i in range(dim // 2)]
    np.testing.assert_allclose(inverse_frequencies(dim, theta), plain, rtol=1e-12)
    np.testing.assert_allclose(inverse_frequencies(dim, theta, "linear", factor=4.0), np.array(plain) / 4, rtol=1e-12)
    llama3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
    expected = [llama3_frequency(i, dim, theta, 8.0, 1.0, 4.0, 8192) for i in range(dim // 2)]
    got = inverse_frequencies(dim, theta, "llama3", **llama3)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # all three regimes occur at these settings: kept, divided, blended
    kept, divided = np.isclose(got, plain, rtol=1e-12), np.isclose(got, np.array(plain) / 8, rtol=1e-12)
    assert kept.any() and divided.any() and (~kept & ~divided).any()


@pytest.mark.parametrize("params", [dict(rope_theta=10000.0), dict(rope_theta=500000.0, rope_type="linear", factor=2.0),
                                    dict(rope_theta=500000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=64)])
def test_rotary_embedding_turns_the_two_halves_of_each_head(params):
    layer = rotary(head_dim=16, **params)
    x, positions = data(2, 3, 5, 16), np.array([0, 1, 2, 30, 1000])
    (out,) = layer.run_numpy(x, positions)
    np.testing.assert_allclose(out, expected_rotary(x, positions, layer.inv_freq), rtol=1e-5, atol=1e-5)


def test_rotated_dot_products_depend_on_the_distance_only():
    layer = rotary(head_dim=8, rope_theta=10000.0)
    q, k = data(1, 1, 1, 8), data(1, 1, 1, 8)

    def score(p, s):
        return float((layer.run_numpy(q, np.array([p]))[0] * layer.run_numpy(k, np.array([s]))[0]).sum())

    assert score(7, 3) == pytest.approx(score(104, 100), rel=1e-4)
    assert score(0, 0) == pytest.approx(float((q * k).sum()), rel=1e-5)


def test_rotary_embedding_refuses_what_does_not_fit():
    with pytest.raises(LayerError, match="head_dim=7 must be even"):
        rotary(head_dim=7)
    with pytest.raises(LayerError, match="rope_type.*is not supported"):
        rotary(rope_type="yarn")
    with pytest.raises(LayerError, match="missing parameter 'factor'"):
        rotary(rope_type="llama3")
    with pytest.raises(LayerError, match="0 < low < high"):
        rotary(rope_type="llama3", factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0,
               original_max_position_embeddings=8192)
    layer = rotary()
    with pytest.raises(ShapeError, match=r"expects x \(B, H, S, 8\)"):
        layer.run_numpy(data(1, 2, 3, 6), np.arange(3))
    with pytest.raises(ShapeError, match=r"expects positions \(3,\)"):
        layer.run_numpy(data(1, 2, 3, 8), np.arange(4))
    with pytest.raises(ShapeError, match="expects integer positions"):
        layer.run_numpy(data(1, 2, 3, 8), np.arange(3, dtype=np.float32))


def test_rotary_embedding_every_path():
    assert_every_path_matches_reference("kuiper.RotaryEmbedding", data(1, 4, 6, 32), np.arange(6),
                                        params=dict(head_dim=32, rope_theta=10000.0))
    assert_every_path_matches_reference("kuiper.RotaryEmbedding", data(2, 2, 1, 64), np.array([77]),
                                        params=dict(head_dim=64, rope_theta=500000.0, rope_type="llama3", factor=32.0,
                                                    low_freq_factor=1.0, high_freq_factor=4.0,
                                                    original_max_position_embeddings=32))


# ---- kuiper.CachedAttention ----------------------------------------------------------------------------------
def attention(heads=4, kv_heads=2, dim=8, max_positions=16, tokens=5, batch=1):
    return make_layer("kuiper.CachedAttention",
                      params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=max_positions),
                      input_shapes=[(batch, heads, tokens, dim), (batch, kv_heads, tokens, dim),
                                    (batch, kv_heads, tokens, dim), (tokens,)])


def expected_causal_attention(q, k, v):
    """The whole sequence at once, a loop over batch, heads and query positions: query head h reads K/V head
    h // (heads / kv_heads), and position i the keys 0..i."""
    batch, heads, tokens, dim = q.shape
    group = heads // k.shape[1]
    out = np.empty(q.shape, np.float64)
    for b, h, i in np.ndindex(batch, heads, tokens):
        keys, values = k[b, h // group, :i + 1].astype(np.float64), v[b, h // group, :i + 1].astype(np.float64)
        scores = keys @ q[b, h, i] / math.sqrt(dim)
        weights = np.exp(scores - scores.max())
        out[b, h, i] = weights / weights.sum() @ values
    return out


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("batch", [1, 2])
def test_prefill_then_decode_equals_attention_over_the_whole_sequence(heads, kv_heads, batch):
    dim, total, prompt = 8, 9, 5
    q, k, v = data(batch, heads, total, dim), data(batch, kv_heads, total, dim), data(batch, kv_heads, total, dim)
    expected = expected_causal_attention(q, k, v)
    layer = attention(heads, kv_heads, dim, max_positions=12, tokens=prompt, batch=batch)
    (out,) = layer.run_numpy(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], np.arange(prompt))
    np.testing.assert_allclose(out, expected[:, :, :prompt], rtol=1e-5, atol=1e-5)
    for p in range(prompt, total):
        step = slice(p, p + 1)
        (out,) = layer.run_numpy(q[:, :, step], k[:, :, step], v[:, :, step], np.array([p]))
        np.testing.assert_allclose(out, expected[:, :, step], rtol=1e-5, atol=1e-5)
    assert layer.filled == total


def test_a_new_sequence_starts_at_position_0_and_a_rewind_overwrites():
    layer = attention(heads=2, kv_heads=1, dim=4, tokens=3)
    first = [data(1, h, 3, 4) for h in (2, 1, 1)]
    layer.run_numpy(*first, np.arange(3))
    second = [data(1, h, 4, 4) for h in (2, 1, 1)]
    (out,) = layer.run_numpy(*second, np.arange(4))  # from 0 again: the first sequence is forgotten
    np.testing.assert_allclose(out, expected_causal_attention(*second), rtol=1e-5, atol=1e-5)
    step = [data(1, h, 1, 4) for h in (2, 1, 1)]
    (out,) = layer.run_numpy(*step, np.array([2]))  # rewind to position 2: positions 0, 1 of `second` stay
    joined = [np.concatenate([a[:, :, :2], b], axis=2) for a, b in zip(second, step)]
    np.testing.assert_allclose(out, expected_causal_attention(*joined)[:, :, 2:], rtol=1e-5, atol=1e-5)
    assert layer.filled == 3
    layer.reset()
    with pytest.raises(InputError, match="start at most at 0"):
        layer.run_numpy(*step, np.array([1]))


def test_cached_attention_refuses_bad_positions_and_shapes():
    layer = attention(heads=2, kv_heads=1, dim=4, max_positions=4, tokens=2)
    q, k, v = data(1, 2, 2, 4), data(1, 1, 2, 4), data(1, 1, 2, 4)
    with pytest.raises(InputError, match=r"positions must be consecutive.*got \[0, 2\]"):
        layer.run_numpy(q, k, v, np.array([0, 2]))
    with pytest.raises(InputError, match="start at most at 0"):
        layer.run_numpy(q, k, v, np.array([1, 2]))
    layer.run_numpy(q, k, v, np.arange(2))
    layer.run_numpy(q, k, v, np.arange(2, 4))
    with pytest.raises(InputError, match="position 5 is past the cache's max_positions=4"):
        layer.run_numpy(q, k, v, np.arange(4, 6))
    with pytest.raises(ShapeError, match=r"expects k and v \(1, 1, 2, 4\)"):
        layer.run_numpy(q, data(1, 2, 2, 4), v, np.arange(2))
    with pytest.raises(ShapeError, match="expects integer positions"):
        layer.run_numpy(q, k, v, np.arange(2, dtype=np.float32))
    with pytest.raises(LayerError, match="num_heads=3 must be a multiple of num_kv_heads=2"):
        attention(heads=3, kv_heads=2)


def test_the_cache_is_counted_as_the_layers_kept_workspace():
    layer = attention(heads=8, kv_heads=2, dim=16, max_positions=100, tokens=1)
    assert layer.keeps_workspace
    # keys and values, kv heads x positions x head_dim float32; the positions in whole blocks of 16: 7 x 16 = 112
    cache = 2 * 2 * 112 * 16 * 4
    assert layer.cache_bytes(1) == cache
    assert layer.workspace_bytes([(1, 8, 1, 16)] * 3 + [(1,)]) == cache
    layer.run_numpy(data(1, 8, 1, 16), data(1, 2, 1, 16), data(1, 2, 1, 16), np.array([0]))
    assert layer.cache_k.nbytes + layer.cache_v.nbytes == cache


@pytest.mark.parametrize("heads, kv_heads, tokens", [(8, 2, 7), (4, 1, 1), (4, 4, 12)])
def test_cached_attention_every_path(heads, kv_heads, tokens):
    dim = 16
    assert_every_path_matches_reference(
        "kuiper.CachedAttention", data(1, heads, tokens, dim), data(1, kv_heads, tokens, dim),
        data(1, kv_heads, tokens, dim), np.arange(tokens),
        params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=32))


# ---- torch.arange --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params, expected", [
    (dict(end=5), np.arange(5)),
    (dict(start=2, end=11, step=3, dtype="torch.long"), np.array([2, 5, 8])),
    (dict(start=0.5, end=2.0, step=0.5), np.array([0.5, 1.0, 1.5], np.float32)),
    (dict(start=0, end=4, dtype="torch.float"), np.arange(4, dtype=np.float32)),
])
def test_arange(params, expected):
    layer = make_layer("torch.arange", params=params, input_shapes=[])
    (out,) = layer.run_numpy()
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_arange_refuses_empty_ranges_and_tensor_bounds():
    with pytest.raises(LayerError, match="give no numbers"):
        make_layer("torch.arange", params=dict(start=3, end=3), input_shapes=[])
    with pytest.raises(LayerError, match="step must not be 0"):
        make_layer("torch.arange", params=dict(end=3, step=0), input_shapes=[])
    with pytest.raises(LayerError, match="dynamic-shape export"):
        make_layer("torch.arange", params=dict(dtype="torch.long"), input_shapes=[(1,)])
