"""The claims of lesson 23: a prefill then decode steps give what one forward over the whole sequence gives; the
tokens generated with the cache are those recomputed without it, from far fewer positions; the cache's positions,
rewinds and resets; its size, when it is allocated and how the memory check counts it; the context's limits and
the end of generation there; the two plans generation uses."""

import math
import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.core.errors import ConfigError, InputError, MemoryLimitError
from kuiper.layers.cached_attention import CachedAttention
from kuiper.llm import DEFAULT_CONTEXT
from kuiper.llm.config import parse_config
from kuiper.llm.weights import expected_tensors
from kuiper.runtime.graph import MAX_PLANS
from lesson_tools import ROOT, check_shell_commands

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

LLAMA3_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                 rope_theta=500000.0)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lesson23") / "tiny"
    write_checkpoint(directory)
    return directory


def caches(lm):
    return [op.layer for op in lm.graph.order if isinstance(op.layer, CachedAttention)]


def test_prefill_then_decode_steps_give_one_prefills_logits(model):
    lm = kuiper.llm.load(model, backend="numpy")
    ids = lm.tokenizer.encode("Once upon a time there was a little robot")
    whole = lm.logits(ids)
    rows = [lm.forward(ids[:5], 0)]
    rows += [lm.forward([token], p) for p, token in enumerate(ids[5:], start=5)]
    np.testing.assert_allclose(np.concatenate(rows), whole, rtol=1e-5, atol=1e-5)


def test_the_cache_changes_the_cost_not_the_tokens(model):
    lm = kuiper.llm.load(model, backend="numpy")
    lm.eos_token_ids = frozenset()
    prompt = lm.tokenizer.encode("Once upon a time")
    ids = list(prompt)
    for _ in range(16):
        ids.append(int(np.argmax(lm.logits(ids)[-1])))
    assert lm.generate(prompt, max_new_tokens=16) == ids[len(prompt):]
    assert sum(len(prompt) + i for i in range(16)) == 16 * 11 + 16 * 15 // 2 == 296
    assert (lm.last_timings.prefill_tokens, lm.last_timings.decode_tokens) == (11, 15)
    assert lm.sequence.length == 11 + 15                               # the last token is never fed back


def test_positions_rewinds_and_resets(model):
    lm = kuiper.llm.load(model, backend="numpy")
    ids = lm.tokenizer.encode("Once upon a time there was")
    lm.logits(ids)
    layers = caches(lm)
    arrays = [id(layer.pool[0]) for layer in layers]
    assert lm.sequence.length == len(ids) and lm.sequence.table == [0]  # alone: its blocks in order
    kept = layers[0].cache_k[:, :, :4].copy()
    changed = layers[0].cache_k[:, :, 4].copy()
    lm.forward([ids[-1]], 4)                                           # rewind: write position 4 again
    assert lm.sequence.length == 5
    np.testing.assert_array_equal(layers[0].cache_k[:, :, :4], kept)
    assert not np.array_equal(layers[0].cache_k[:, :, 4], changed)
    with pytest.raises(InputError, match="starts at most at 5"):
        lm.forward([ids[-1]], 6)
    lm.reset()
    assert lm.sequence.length == 0
    lm.logits(ids[:3])
    assert [id(layer.pool[0]) for layer in layers] == arrays            # the same arrays, still allocated


def test_the_cache_is_allocated_whole_at_the_first_forward_and_counted_as_kept_workspace(model):
    lm = kuiper.llm.load(model, context=40, backend="numpy")
    layers = caches(lm)
    assert all(layer.cache_k is None for layer in layers)
    assert all(layer.keeps_workspace and layer.max_positions == 40 for layer in layers)
    shapes = [(1, 4, 1, 8), (1, 2, 1, 8), (1, 2, 1, 8), (1,)]
    assert all(layer.workspace_bytes(shapes) == layer.cache_bytes(1) for layer in layers)
    lm.logits([0, 1])
    # 40 positions in whole blocks of 16: 48
    assert all(layer.cache_k.shape == layer.cache_v.shape == (1, 2, 48, 8) for layer in layers)
    assert sum(layer.cache_bytes(1) for layer in layers) == lm.config.kv_cache_bytes_per_token() * 48 == 48 * 256


def test_the_sizes_the_notes_give():
    config = parse_config(LLAMA3_8B)
    assert config.kv_cache_bytes_per_token() == 256 * 1024
    assert config.kv_cache_bytes_per_token() * 4096 == 2 ** 30
    assert config.kv_cache_bytes_per_token(2) * 131072 == 16 * 2 ** 30
    weights = sum(math.prod(shape) for shape in expected_tensors(config).values()) * 2
    assert 0.9 < 16 * 2 ** 30 / weights < 1.2                          # about as much as the weights in 16 bits
    matrices = sum(math.prod(s) for n, s in expected_tensors(config).items() if n != "model.embed_tokens.weight")
    assert matrices // (2 * 32 * 32 * 128) == 28629
    assert parse_config(LLAMA3_8B | dict(num_key_value_heads=32)).kv_cache_bytes_per_token() == 4 * 256 * 1024


def test_the_memory_check_counts_the_weights_and_the_cache_before_building(model):
    with pytest.raises(MemoryLimitError, match=r"weights in float32 \(141\.4 KiB\) and a KV cache of 64 positions "
                                               r"\(16\.0 KiB\) need 157\.4 KiB.*context= shrinks the cache"):
        kuiper.llm.load(model, memory_limit=100_000, backend="numpy")
    assert kuiper.llm.load(model, context=16, backend="numpy").context == 16


def test_the_contexts_limits(tmp_path):
    write_checkpoint(tmp_path / "long", max_position_embeddings=10000)
    assert kuiper.llm.load(tmp_path / "long", backend="numpy").context == DEFAULT_CONTEXT == 4096
    write_checkpoint(tmp_path / "mistral", model_type="mistral", sliding_window=32)
    assert kuiper.llm.load(tmp_path / "mistral", backend="numpy").context == 32
    with pytest.raises(ConfigError, match="context=40: give a whole number from 1 to 32 .*sliding_window"):
        kuiper.llm.load(tmp_path / "mistral", context=40, backend="numpy")


def test_generation_stops_at_the_end_of_the_context(model):
    lm = kuiper.llm.load(model, context=16, backend="numpy")
    lm.eos_token_ids = frozenset()
    prompt = lm.tokenizer.encode("Once upon a time")
    assert len(lm.generate(prompt, max_new_tokens=50)) == 16 - len(prompt) + 1
    assert lm.sequence.length == 16


def test_generation_uses_two_plans(model):
    lm = kuiper.llm.load(model, backend="numpy")
    assert MAX_PLANS == 8 and lm.graph.max_plans == MAX_PLANS
    lm.graph.clear_plans()
    prompt = lm.tokenizer.encode("Once upon a time")
    lm.generate(prompt, max_new_tokens=16)
    signatures = [[shape for shape, _ in signature] for signature in lm.graph.plans]
    assert signatures == [[(1, len(prompt)), (len(prompt),)], [(1, 1), (1,)]]
    for n in range(3, 3 + MAX_PLANS + 2):                             # many prompt lengths: at most MAX_PLANS kept
        lm.logits(prompt[:n] if n <= len(prompt) else prompt + [5] * (n - len(prompt)))
    assert len(lm.graph.plans) == MAX_PLANS


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(23, capsys)
