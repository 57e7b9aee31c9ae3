"""Checkpoint of lesson 23: exercises/lesson_23.py's cache size held to ModelConfig and to the caches kuiper's
CachedAttention layers allocate; its decode_step held to CachedAttention over a prefill and decode steps and to
causal attention recomputed over the whole sequence without a cache; its count of the tokens processed held to the
forwards kuiper.llm runs, with the cache (generate) and without it (a prefill of every prefix)."""

import math
import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.layers.cached_attention import CachedAttention
from kuiper.llm.config import parse_config
from kuiper.runtime.backends import make_layer
from lesson_tools import ROOT, exercise

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

ex = exercise(23)
RNG = np.random.default_rng(23)

#: the sizes of a few real models' config.json (only what the cache depends on, and what parse_config needs)
REAL = {
    "Llama 3 8B": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8),
    "Llama 3.2 1B": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8),
    "Qwen2.5 0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
    "Llama 2 7B": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32),
}


def data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lesson23") / "tiny"
    write_checkpoint(directory)
    return directory


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("positions, itemsize", [(1, 4), (4096, 4), (131072, 2)])
def test_kv_cache_bytes_of_real_models(name, positions, itemsize):
    config = parse_config(dict(model_type="llama", intermediate_size=1, vocab_size=1, max_position_embeddings=1,
                               **REAL[name]))
    assert ex.kv_cache_bytes(config, positions, itemsize) == config.kv_cache_bytes_per_token(itemsize) * positions


def test_kv_cache_bytes_is_what_kuipers_layers_allocate(model):
    lm = kuiper.llm.load(model, context=48, backend="numpy")
    layers = [op.layer for op in lm.graph.order if isinstance(op.layer, CachedAttention)]
    assert sum(layer.cache_bytes(1) for layer in layers) == ex.kv_cache_bytes(lm.config, 48)
    lm.logits([0, 5, 9])
    assert sum(layer.cache_k.nbytes + layer.cache_v.nbytes for layer in layers) == ex.kv_cache_bytes(lm.config, 48)


def attention_layer(heads, kv_heads, dim, max_positions, tokens):
    return make_layer("kuiper.CachedAttention",
                      params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=max_positions),
                      input_shapes=[(1, heads, tokens, dim), (1, kv_heads, tokens, dim), (1, kv_heads, tokens, dim),
                                    (tokens,)])


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_decode_step_is_kuipers_cached_attention(heads, kv_heads):
    dim, prompt, total, max_positions = 8, 5, 11, 16
    q, k, v = data(1, heads, total, dim), data(1, kv_heads, total, dim), data(1, kv_heads, total, dim)
    cache_k, cache_v = (np.zeros((1, kv_heads, max_positions, dim), np.float32) for _ in range(2))
    layer = attention_layer(heads, kv_heads, dim, max_positions, prompt)
    filled = 0
    for step in [slice(0, prompt)] + [slice(p, p + 1) for p in range(prompt, total)]:   # prefill, then decode
        positions = np.arange(step.start, step.stop)
        expected = layer.run_numpy(q[:, :, step], k[:, :, step], v[:, :, step], positions)[0]
        got = ex.decode_step(cache_k, cache_v, filled, q[:, :, step], k[:, :, step], v[:, :, step])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        filled = step.stop
        np.testing.assert_array_equal(cache_k[:, :, :filled], layer.cache_k[:, :, :filled])   # written in place
        np.testing.assert_array_equal(cache_v[:, :, :filled], layer.cache_v[:, :, :filled])


def test_decode_step_is_attention_recomputed_without_a_cache():
    """Each decode step's output is the last row of causal attention over the whole sequence so far, recomputed
    from scratch (SDPA with the K/V heads repeated for their groups)."""
    heads, kv_heads, dim, total = 4, 2, 8, 9
    q, k, v = data(1, heads, total, dim), data(1, kv_heads, total, dim), data(1, kv_heads, total, dim)
    cache_k, cache_v = (np.zeros((1, kv_heads, total, dim), np.float32) for _ in range(2))
    ex.decode_step(cache_k, cache_v, 0, q[:, :, :3], k[:, :, :3], v[:, :, :3])
    for p in range(3, total):
        got = ex.decode_step(cache_k, cache_v, p, q[:, :, p:p + 1], k[:, :, p:p + 1], v[:, :, p:p + 1])
        seen = slice(0, p + 1)
        shape = (1, heads, p + 1, dim)
        sdpa = make_layer("F.scaled_dot_product_attention", params=dict(is_causal=True), input_shapes=[shape] * 3)
        shared = [np.repeat(a[:, :, seen], heads // kv_heads, axis=1) for a in (k, v)]
        (whole,) = sdpa.run_numpy(q[:, :, seen], *shared)
        np.testing.assert_allclose(got, whole[:, :, -1:], rtol=1e-5, atol=1e-5)


class Counting:
    """Wraps a LanguageModel's forward to count the token positions each call runs."""

    def __init__(self, lm):
        self.lm, self.tokens, self.calls = lm, 0, 0
        self.forward = lm.forward
        lm.forward = self

    def __call__(self, ids, start):
        self.tokens += len(ids)
        self.calls += 1
        return self.forward(ids, start)


@pytest.mark.parametrize("prompt_text, new_tokens", [("Once upon a time", 12), ("It", 20), ("The robot read every", 1)])
def test_tokens_processed_with_and_without_the_cache(model, prompt_text, new_tokens):
    lm = kuiper.llm.load(model, backend="numpy")
    lm.eos_token_ids = frozenset()                # no early stop: every run makes new_tokens tokens
    prompt = lm.tokenizer.encode(prompt_text)
    counting = Counting(lm)
    cached = lm.generate(prompt, max_new_tokens=new_tokens)
    assert len(cached) == new_tokens
    assert counting.tokens == ex.tokens_processed(len(prompt), new_tokens, cached=True)
    counting.tokens = 0
    ids = list(prompt)
    for _ in range(new_tokens):                   # no cache: a prefill of the whole sequence for every token
        ids.append(int(np.argmax(lm.logits(ids)[-1])))
    assert ids[len(prompt):] == cached            # the same tokens: the cache changes the cost, not the result
    assert counting.tokens == ex.tokens_processed(len(prompt), new_tokens, cached=False)


def test_without_the_cache_the_count_grows_as_the_square():
    assert ex.tokens_processed(10, 1, cached=False) == ex.tokens_processed(10, 1, cached=True) == 10
    for n in (100, 1000):
        ratio = ex.tokens_processed(1, n, cached=False) / ex.tokens_processed(1, n, cached=True)
        assert math.isclose(ratio, (n + 1) / 2, rel_tol=0.02)
