"""Lesson 23: Prefill and decode with a KV cache. Reference solutions."""

import math

import numpy as np


def kv_cache_bytes(config, positions: int, itemsize: int = 4) -> int:
    """The bytes a KV cache of `positions` positions takes for a model of `config` (a kuiper.llm.config.ModelConfig:
    num_hidden_layers, num_key_value_heads, head_dim): a key and a value, each of head_dim numbers of `itemsize`
    bytes, per K/V head, per layer, per position. See course_notes/23-kv-cache.md, exercise 1."""
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * positions * itemsize


def decode_step(cache_k, cache_v, filled: int, q, k, v):
    """One forward of cached causal attention. cache_k and cache_v (B, KV, max_positions, D) hold the keys and
    values of positions 0..filled-1; q (B, H, S, D), k and v (B, KV, S, D) are the new tokens' at positions
    filled..filled+S-1 (S = the prompt's length for a prefill, 1 for a decode step). Write k and v into the caches
    at those positions (in place), then return the attention of the new queries, (B, H, S, D) float32: query s, at
    position filled + s, sees cached positions 0..filled+s; query head h reads K/V head h // (H / KV); scores
    q · k / sqrt(D), softmax, weighted sum of the values. See course_notes/23-kv-cache.md, exercise 2."""
    batch, heads, tokens, dim = q.shape
    kv_heads, end = cache_k.shape[1], filled + tokens
    cache_k[:, :, filled:end] = k
    cache_v[:, :, filled:end] = v
    group = heads // kv_heads
    keys = np.repeat(cache_k[:, :, :end], group, axis=1)          # (B, H, end, D)
    values = np.repeat(cache_v[:, :, :end], group, axis=1)
    scores = q.astype(np.float32) @ keys.swapaxes(-1, -2) / np.float32(math.sqrt(dim))   # (B, H, S, end)
    seen = np.arange(end)[None, :] <= np.arange(filled, end)[:, None]                    # (S, end)
    scores = np.where(seen, scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (scores / scores.sum(axis=-1, keepdims=True) @ values).astype(np.float32)


def tokens_processed(prompt: int, new_tokens: int, cached: bool = True) -> int:
    """How many token positions go through the model's layers to generate `new_tokens` (>= 1) tokens after a
    prompt of `prompt` tokens, with no end-of-sequence token on the way. With the cache (`cached`): one prefill of
    the prompt, then one position per new token except the last, which is returned and never fed back. Without
    it: each new token is chosen from a forward over the whole sequence so far, the prompt and the tokens before
    it. See course_notes/23-kv-cache.md, exercise 3."""
    if cached:
        return prompt + new_tokens - 1
    return sum(prompt + i for i in range(new_tokens))
