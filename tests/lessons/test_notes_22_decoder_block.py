"""The claims of lesson 22: RMSNorm by its formula in float64 and in float32 whatever the checkpoint stored, the
rotary embedding as complex multiplication with scores that depend on the distance only, Llama 3's three regimes,
grouped-query attention as a loop over heads and positions, the decoder graph kuiper writes (operators per block,
names, inputs, what fusion makes of it in `kuiper inspect`), the tensors' names and the family's variants."""

import cmath
import contextlib
import io
import math
import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.app.cli import main
from kuiper.core.errors import CheckpointError
from kuiper.layers.cached_attention import CachedAttention
from kuiper.layers.rms_norm import RMSNorm
from kuiper.layers.rotary import RotaryEmbedding, inverse_frequencies
from kuiper.llm.config import parse_config
from kuiper.llm.weights import expected_tensors
from kuiper.pnnx import parse_param
from kuiper.runtime.backends import make_layer
from lesson_tools import ROOT, check_shell_commands

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

RNG = np.random.default_rng(2222)
BLOCK = ["nn.RMSNorm", "nn.Linear", "Tensor.reshape", "Tensor.permute", "nn.Linear", "Tensor.reshape",
         "Tensor.permute", "nn.Linear", "Tensor.reshape", "Tensor.permute", "kuiper.RotaryEmbedding",
         "kuiper.RotaryEmbedding", "kuiper.CachedAttention", "Tensor.permute", "Tensor.reshape", "nn.Linear",
         "pnnx.Expression", "nn.RMSNorm", "nn.Linear", "nn.Linear", "F.silu", "pnnx.Expression", "nn.Linear",
         "pnnx.Expression"]


def data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lesson22") / "tiny"
    write_checkpoint(directory)
    return directory


def test_rms_norm_is_its_formula():
    x, weight = data(3, 5, 16) * 4, data(16)
    layer = make_layer("nn.RMSNorm", params=dict(normalized_shape=[16], eps=1e-6), attrs=dict(weight=weight),
                       input_shapes=[x.shape])
    wide = x.astype(np.float64)
    expected = wide / np.sqrt((wide ** 2).mean(axis=-1, keepdims=True) + 1e-6) * weight
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_precision_weights_are_held_and_normalised_in_float32(tmp_path, dtype):
    write_checkpoint(tmp_path / dtype, dtype=dtype)
    lm = kuiper.llm.load(tmp_path / dtype, backend="numpy")
    norms = [op.layer for op in lm.graph.order if isinstance(op.layer, RMSNorm)]
    assert len(norms) == 2 * 2 + 1 and all(n.scale.dtype == np.float32 for n in norms)
    assert lm.logits([0, 5, 9]).dtype == np.float32


def test_the_rotary_embedding_is_complex_multiplication_of_the_halves():
    layer = make_layer("kuiper.RotaryEmbedding", params=dict(head_dim=8, rope_theta=10000.0),
                       input_shapes=[(1, 2, 3, 8), (3,)])
    x, positions = data(1, 2, 3, 8), np.array([0, 7, 100000])
    out = layer.run_numpy(x, positions)[0]
    for h, s, i in np.ndindex(2, 3, 4):
        turned = complex(x[0, h, s, i], x[0, h, s, i + 4]) * cmath.exp(1j * positions[s] * 10000.0 ** (-2 * i / 8))
        assert out[0, h, s, i] == pytest.approx(turned.real, abs=2e-5)
        assert out[0, h, s, i + 4] == pytest.approx(turned.imag, abs=2e-5)
    np.testing.assert_allclose(layer.inv_freq, [1, 0.1, 0.01, 0.001], rtol=1e-12)


def test_scores_depend_on_the_distance_only():
    layer = make_layer("kuiper.RotaryEmbedding", params=dict(head_dim=16, rope_theta=10000.0),
                       input_shapes=[(1, 1, 1, 16), (1,)])
    q, k = data(1, 1, 1, 16), data(1, 1, 1, 16)

    def score(p, s):
        return float((layer.run_numpy(q, np.array([p]))[0] * layer.run_numpy(k, np.array([s]))[0]).sum())

    for distance in (0, 1, 5, 40):
        scores = [score(start + distance, start) for start in (0, 3, 250, 5000)]
        assert max(scores) - min(scores) < 1e-3
    assert abs(score(7, 3) - score(7, 4)) > 1e-2


def test_angles_are_computed_in_float64_then_rounded_once():
    layer = make_layer("kuiper.RotaryEmbedding", params=dict(head_dim=8, rope_theta=10000.0),
                       input_shapes=[(1, 1, 1, 8), (1,)])
    cos, sin = layer.cos_sin(np.array([100000]))
    angles = 100000 * (10000.0 ** (-np.arange(0, 8, 2) / 8))
    np.testing.assert_array_equal(cos[0], np.cos(angles).astype(np.float32))
    np.testing.assert_array_equal(sin[0], np.sin(angles).astype(np.float32))


def test_llama3_scaling_keeps_slows_and_blends_by_wavelength():
    plain = inverse_frequencies(128, 500000.0)
    scaled = inverse_frequencies(128, 500000.0, "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=8192)
    wavelength = 2 * math.pi / plain
    kept, slowed = np.isclose(scaled, plain, rtol=1e-12), np.isclose(scaled, plain / 8, rtol=1e-12)
    assert (kept.sum(), slowed.sum(), (~kept & ~slowed).sum()) == (29, 29, 6)
    assert (wavelength[kept] < 2048).all() and (wavelength[slowed] > 8192).all()
    between = ~kept & ~slowed
    assert ((wavelength[between] >= 2048) & (wavelength[between] <= 8192)).all()
    assert (np.diff(scaled) < 0).all()                                  # still slower pair after pair


def test_the_config_reads_either_key_and_refuses_other_kinds():
    base = dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                num_attention_heads=4, vocab_size=10, max_position_embeddings=64)
    llama3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=8192)
    old = parse_config(base | dict(rope_theta=500000.0, rope_scaling=llama3))
    new = parse_config(base | dict(rope_parameters=dict(llama3, rope_theta=500000.0)))
    assert old.rope_scaling == new.rope_scaling and old.rope_theta == new.rope_theta == 500000.0
    assert old.num_key_value_heads == 4                                  # no key: as many as query heads
    with pytest.raises(CheckpointError, match="rope_type 'yarn' is not supported"):
        parse_config(base | dict(rope_scaling=dict(rope_type="yarn", factor=4.0)))


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 1), (3, 3)])
def test_grouped_query_attention_is_a_loop_over_heads_and_positions(heads, kv_heads):
    tokens, dim = 6, 4
    q, k, v = data(1, heads, tokens, dim), data(1, kv_heads, tokens, dim), data(1, kv_heads, tokens, dim)
    layer = make_layer("kuiper.CachedAttention",
                       params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=8),
                       input_shapes=[q.shape, k.shape, v.shape, (tokens,)])
    out = layer.run_numpy(q, k, v, np.arange(tokens))[0]
    group = heads // kv_heads
    for h, i in np.ndindex(heads, tokens):
        g = h // group                                                  # consecutive query heads share one
        scores = [float(q[0, h, i] @ k[0, g, j]) / math.sqrt(dim) for j in range(i + 1)]   # keys 0..i only
        weights = np.exp(np.array(scores) - max(scores))
        expected = (weights / weights.sum()) @ v[0, g, :i + 1].astype(np.float64)
        np.testing.assert_allclose(out[0, h, i], expected, rtol=1e-5, atol=1e-5)


def records(lm):
    """The operators of the .param text kuiper wrote, as its reader parses them, in the text's order."""
    return parse_param(lm.directory / "decoder.pnnx.param", text=lm.param_text).operators


def test_the_graph_kuiper_writes(tiny):
    lm = kuiper.llm.load(tiny, backend="numpy")
    ops = records(lm)
    assert [op.type for op in ops if op.name.startswith("model.layers.0.")] == BLOCK
    assert [op.type for op in ops if op.name.startswith("model.layers.1.")] == BLOCK
    assert len(ops) == 2 + 1 + 24 * 2 + 1 + 1 + 1             # inputs, embedding, blocks, norm, lm_head, output
    assert [op.name for op in ops if op.type == "pnnx.Input"] == ["input_ids", "positions"]
    readers = [op for op in ops if "positions" in op.inputs]
    assert {op.type for op in readers} == {"kuiper.RotaryEmbedding", "kuiper.CachedAttention"}
    assert len(readers) == 3 * 2
    attention = [op.layer for op in lm.graph.order if isinstance(op.layer, CachedAttention)]
    assert [(a.num_heads, a.num_kv_heads, a.group) for a in attention] == [(4, 2, 2)] * 2
    rotary = [r for op in lm.graph.order for r in getattr(op.layer, "rotaries", ()) if r is not None]
    assert len(rotary) == 4 and all(isinstance(r, RotaryEmbedding) for r in rotary)  # in the heads pass's operators
    line = next(line for line in lm.param_text.splitlines() if "layers.0.self_attn.attention " in line)
    assert " ".join(line.split()) == ("kuiper.CachedAttention model.layers.0.self_attn.attention 4 1 11 12 10 "
                                      "positions 13 head_dim=8 max_positions=64 num_heads=4 num_kv_heads=2 "
                                      "#13=(1,4,?,8)f32")


def test_kuiper_inspect_shows_the_fused_block(tiny):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["inspect", str(tiny)]) == 0
    out = printed.getvalue()
    assert "at a prompt of 8 tokens" in out and "KV cache:" in out
    rows = [line.split("│")[2].strip() for line in out.splitlines() if "model.layers.0." in line]
    assert len(rows) == 8
    assert rows.count("torch.split+Tensor.reshape+Tensor.permute+kuiper.RotaryEmbedding") == 1  # cut and turned
    assert "kuiper.CachedAttention+Tensor.permute+Tensor.reshape" in rows  # the heads joined as they are written
    assert "nn.Linear+nn.Linear+nn.Linear" in rows  # q, k and v as one product
    assert "nn.Linear+nn.Linear+F.silu+pnnx.Expression" in rows  # the gated MLP's four as one
    assert rows.count("nn.Linear+pnnx.Expression") == 2                # each residual add into its Linear


@pytest.mark.parametrize("overrides, present, absent", [
    ({}, ["lm_head.weight"], ["model.layers.0.self_attn.q_proj.bias"]),
    (dict(tie_word_embeddings=True), [], ["lm_head.weight"]),
    (dict(model_type="qwen2"), [f"model.layers.0.self_attn.{p}_proj.bias" for p in "qkv"],
     ["model.layers.0.self_attn.o_proj.bias"]),
    (dict(attention_bias=True), [f"model.layers.0.self_attn.{p}_proj.bias" for p in "qkvo"], []),
])
def test_the_tensors_names_and_the_familys_variants(tmp_path, overrides, present, absent):
    config, held = write_checkpoint(tmp_path / "m", **overrides)
    lm = kuiper.llm.load(tmp_path / "m", backend="numpy")
    expected = expected_tensors(lm.config)
    assert set(expected) == set(held)
    for name in present:
        assert name in expected
    for name in absent:
        assert name not in expected
    assert expected["model.layers.0.mlp.down_proj.weight"] == (32, 48)   # (out_features, in_features)
    bound = {f"{op.name}.{key}" for op in records(lm) for key in op.attrs}
    assert bound == set(expected) | {"lm_head.weight"}                   # operators named as the modules
    np.testing.assert_array_equal(lm.weights.view("lm_head.weight", "f32", (config["vocab_size"], 32)),
                                  held.get("lm_head.weight", held["model.embed_tokens.weight"]))


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(22, capsys)
