"""Checkpoint of lesson 22: the decoder block's parts in exercises/lesson_22.py held to kuiper's layers (nn.RMSNorm,
kuiper.RotaryEmbedding and its inverse_frequencies, kuiper.CachedAttention on a prefill, nn.Linear and F.silu),
then a whole tiny Llama made of them held to kuiper.llm's logits for the same checkpoint."""

import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.layers.rotary import inverse_frequencies
from kuiper.runtime.backends import make_layer
from lesson_tools import ROOT, exercise

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

ex = exercise(22)
RNG = np.random.default_rng(22)
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)


def data(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 7, 32), (2, 3, 64), (5, 16)], ids=str)
def test_rms_norm_is_kuipers(shape):
    x, weight = data(*shape, scale=3.0), data(shape[-1])
    layer = make_layer("nn.RMSNorm", params=dict(normalized_shape=[shape[-1]], eps=1e-5, elementwise_affine=True),
                       attrs=dict(weight=weight), input_shapes=[shape])
    np.testing.assert_allclose(ex.rms_norm(x, weight, 1e-5), layer.run_numpy(x)[0], rtol=1e-5, atol=1e-6)
    assert ex.rms_norm(x, weight, 1e-5).dtype == np.float32


def test_rms_norm_does_not_subtract_the_mean():
    row = np.array([[1.0, 3.0]], np.float32)                    # mean square 5: divided by sqrt(5 + eps)
    np.testing.assert_allclose(ex.rms_norm(row, np.ones(2, np.float32), 0.0), row / np.sqrt(5), rtol=1e-6)


@pytest.mark.parametrize("head_dim, theta", [(8, 10000.0), (64, 500000.0), (128, 1000000.0)])
def test_rope_frequencies_are_kuipers(head_dim, theta):
    np.testing.assert_allclose(ex.rope_frequencies(head_dim, theta), inverse_frequencies(head_dim, theta),
                               rtol=1e-12)
    for llama3 in (LLAMA3, dict(LLAMA3, original_max_position_embeddings=8192)):
        np.testing.assert_allclose(ex.rope_frequencies(head_dim, theta, llama3),
                                   inverse_frequencies(head_dim, theta, "llama3", **llama3), rtol=1e-12)


@pytest.mark.parametrize("rope", [dict(rope_theta=10000.0), dict(rope_theta=500000.0, rope_type="llama3", **LLAMA3)],
                         ids=["default", "llama3"])
@pytest.mark.parametrize("positions", [[0, 1, 2, 3, 4], [40, 41, 42, 43, 44], [0, 5, 77, 300, 1000]], ids=str)
def test_rotate_is_kuipers_rotary_embedding(rope, positions):
    x, positions = data(2, 3, 5, 16), np.array(positions)
    layer = make_layer("kuiper.RotaryEmbedding", params=dict(head_dim=16, **rope),
                       input_shapes=[x.shape, positions.shape])
    np.testing.assert_allclose(ex.rotate(x, positions, layer.inv_freq), layer.run_numpy(x, positions)[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (6, 1), (8, 2)])
def test_gqa_attention_is_kuipers_prefill(heads, kv_heads):
    batch, tokens, dim = 2, 7, 8
    q, k, v = data(batch, heads, tokens, dim), data(batch, kv_heads, tokens, dim), data(batch, kv_heads, tokens, dim)
    layer = make_layer("kuiper.CachedAttention",
                       params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=16),
                       input_shapes=[q.shape, k.shape, v.shape, (tokens,)])
    expected = layer.run_numpy(q, k, v, np.arange(tokens))[0]          # a prefill from an empty cache
    np.testing.assert_allclose(ex.gqa_attention(q, k, v), expected, rtol=1e-5, atol=1e-5)


def test_gqa_attention_is_sdpa_with_the_kv_heads_repeated():
    q, k, v = data(1, 6, 5, 4), data(1, 2, 5, 4), data(1, 2, 5, 4)
    shared = [np.repeat(a, 3, axis=1) for a in (k, v)]                 # heads 0-2 read K/V head 0, 3-5 head 1
    sdpa = make_layer("F.scaled_dot_product_attention", params=dict(is_causal=True), input_shapes=[q.shape] * 3)
    np.testing.assert_allclose(ex.gqa_attention(q, k, v), sdpa.run_numpy(q, *shared)[0], rtol=1e-5, atol=1e-5)


def test_swiglu_is_kuipers_linear_silu_and_product():
    x = data(1, 5, 16)
    gate_w, up_w, down_w = data(24, 16, scale=0.3), data(24, 16, scale=0.3), data(16, 24, scale=0.3)

    def linear(w, inp):
        layer = make_layer("nn.Linear", params=dict(bias=False, in_features=w.shape[1], out_features=w.shape[0]),
                           attrs=dict(weight=w), input_shapes=[inp.shape])
        return layer.run_numpy(inp)[0]

    gate = linear(gate_w, x)
    silu = make_layer("F.silu", input_shapes=[gate.shape]).run_numpy(gate)[0]
    expected = linear(down_w, silu * linear(up_w, x))
    np.testing.assert_allclose(ex.swiglu(x, gate_w, up_w, down_w), expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module", params=["llama GQA", "llama3 rope, tied", "qwen2 biases"])
def checkpoint(request, tmp_path_factory):
    overrides = {"llama GQA": {},
                 "llama3 rope, tied": dict(rope_theta=500000.0, tie_word_embeddings=True,
                                           rope_scaling=dict(rope_type="llama3", **LLAMA3)),
                 "qwen2 biases": dict(model_type="qwen2", num_key_value_heads=1)}[request.param]
    directory = tmp_path_factory.mktemp("lesson22") / "tiny"
    config, weights = write_checkpoint(directory, **overrides)
    return directory, config, weights


def test_a_tiny_llama_of_your_parts_gives_kuipers_logits(checkpoint):
    """The decoder of kuiper/llm/decoder.py written with your functions: embedding, then per block RMSNorm,
    the q, k, v projections split into heads, rotated, grouped-query attention, o_proj and the residual,
    RMSNorm, SwiGLU and the residual; the final RMSNorm and lm_head."""
    directory, config, w = checkpoint
    lm = kuiper.llm.load(directory, backend="numpy")
    ids = lm.tokenizer.encode("Once upon a time there was a robot")
    c = lm.config
    inv_freq = ex.rope_frequencies(c.head_dim, c.rope_theta, c.rope_scaling or None)
    positions = np.arange(len(ids))

    def project(x, name):
        y = x @ w[f"{name}.weight"].T
        return y + w[f"{name}.bias"] if f"{name}.bias" in w else y

    def heads(x, count):  # (S, count * head_dim) -> (1, count, S, head_dim)
        return x.reshape(len(ids), count, c.head_dim).transpose(1, 0, 2)[None]

    h = w["model.embed_tokens.weight"][ids]
    for i in range(c.num_hidden_layers):
        block = f"model.layers.{i}"
        x = ex.rms_norm(h, w[f"{block}.input_layernorm.weight"], c.rms_norm_eps)
        q = ex.rotate(heads(project(x, f"{block}.self_attn.q_proj"), c.num_attention_heads), positions, inv_freq)
        k = ex.rotate(heads(project(x, f"{block}.self_attn.k_proj"), c.num_key_value_heads), positions, inv_freq)
        v = heads(project(x, f"{block}.self_attn.v_proj"), c.num_key_value_heads)
        o = ex.gqa_attention(q, k, v)[0].transpose(1, 0, 2).reshape(len(ids), -1)
        h = h + project(o, f"{block}.self_attn.o_proj")
        x = ex.rms_norm(h, w[f"{block}.post_attention_layernorm.weight"], c.rms_norm_eps)
        h = h + ex.swiglu(x, w[f"{block}.mlp.gate_proj.weight"], w[f"{block}.mlp.up_proj.weight"],
                          w[f"{block}.mlp.down_proj.weight"])
    h = ex.rms_norm(h, w["model.norm.weight"], c.rms_norm_eps)
    logits = h @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T
    np.testing.assert_allclose(logits, lm.logits(ids), rtol=1e-4, atol=1e-4)
