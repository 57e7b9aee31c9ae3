"""The claims of lesson 26 about kuiper: every Linear of a decoder loaded with quantize="int8" is an Int8Linear and
the embedding stays float; its weights come back within half a step; per-group scales beat per-row scales on a row
with an outlier; the fast forwards equal the reference; the command line's --quantize int8."""

import sys

import numpy as np

import kuiper.llm
from kuiper.app import cli
from kuiper.layers.embedding import Embedding
from kuiper.layers.int8_linear import Int8Linear, dequantize, quantize
from kuiper.layers.linear import Linear
from lesson_tools import ROOT

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402


def test_every_linear_is_int8_and_the_embedding_float(tmp_path):
    write_checkpoint(tmp_path / "tiny", hidden_size=64, intermediate_size=96, tie_word_embeddings=True)
    lm = kuiper.llm.load(tmp_path / "tiny", quantize="int8", backend="numpy")
    layers = [op.layer for op in lm.graph.order]
    # 2 blocks and lm_head, q, k and v joined into one operator (runtime/siblings.py)
    assert sum(len(op.absorbed) or 1 for op in lm.graph.order if isinstance(op.layer, Int8Linear)) == 7 * 2 + 1
    assert not any(isinstance(layer, Linear) for layer in layers)
    (embedding,) = [layer for layer in layers if isinstance(layer, Embedding)]
    assert embedding.table.dtype == np.float32


def test_symmetric_scales_and_half_a_step():
    w = np.random.default_rng(1).standard_normal((4, 96)).astype(np.float32)
    q, scales = quantize(w)
    assert q.min() >= -127 and q.max() <= 127
    assert np.all(np.abs(q).reshape(4, 3, 32).max(axis=2) == 127)  # the largest weight of a group maps to ±127
    assert np.all(np.abs(dequantize(q, scales) - w) <= np.repeat(scales, 32, axis=1) / 2 * (1 + 1e-6))


def test_groups_limit_an_outliers_damage():
    row = np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)
    row[0, 7] = 40.0
    errors = {}
    for group in (256, 32):
        q, s = quantize(row, group)
        errors[group] = float(np.abs(dequantize(q, s, group) - row)[0, 32:].mean())
    assert errors[256] > 10 * errors[32]


def test_fast_forwards_are_the_reference(tmp_path):
    write_checkpoint(tmp_path / "tiny", hidden_size=64, intermediate_size=96)
    reference = kuiper.llm.load(tmp_path / "tiny", backend="reference", quantize="int8")
    fast = kuiper.llm.load(tmp_path / "tiny", backend="numpy", quantize="int8")
    ids = reference.tokenizer.encode("Once upon a time")
    expected = reference.logits(ids)
    np.testing.assert_allclose(fast.logits(ids), expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_generate_quantize_int8(tmp_path, capsys):
    write_checkpoint(tmp_path / "tiny")
    assert cli.main(["generate", str(tmp_path / "tiny"), "--prompt", "Once", "--quantize", "int8",
                     "--temperature", "0", "--max-new-tokens", "4"]) in (0, None)
    assert "decode" in capsys.readouterr().err
