"""Lesson 23: Prefill and decode with a KV cache. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 23`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or the definitions in the notes.
"""

import math

import numpy as np


def kv_cache_bytes(config, positions: int, itemsize: int = 4) -> int:
    """The bytes a KV cache of `positions` positions takes for a model of `config` (a kuiper.llm.config.ModelConfig:
    num_hidden_layers, num_key_value_heads, head_dim): a key and a value, each of head_dim numbers of `itemsize`
    bytes, per K/V head, per layer, per position. See course_notes/23-kv-cache.md, exercise 1."""
    raise NotImplementedError('lesson 23: write kv_cache_bytes() in exercises/lesson_23.py; '
                              'see course_notes/23-kv-cache.md, exercise 1')


def decode_step(cache_k, cache_v, filled: int, q, k, v):
    """One forward of cached causal attention. cache_k and cache_v (B, KV, max_positions, D) hold the keys and
    values of positions 0..filled-1; q (B, H, S, D), k and v (B, KV, S, D) are the new tokens' at positions
    filled..filled+S-1 (S = the prompt's length for a prefill, 1 for a decode step). Write k and v into the caches
    at those positions (in place), then return the attention of the new queries, (B, H, S, D) float32: query s, at
    position filled + s, sees cached positions 0..filled+s; query head h reads K/V head h // (H / KV); scores
    q · k / sqrt(D), softmax, weighted sum of the values. See course_notes/23-kv-cache.md, exercise 2."""
    raise NotImplementedError('lesson 23: write decode_step() in exercises/lesson_23.py; '
                              'see course_notes/23-kv-cache.md, exercise 2')


def tokens_processed(prompt: int, new_tokens: int, cached: bool = True) -> int:
    """How many token positions go through the model's layers to generate `new_tokens` (>= 1) tokens after a
    prompt of `prompt` tokens, with no end-of-sequence token on the way. With the cache (`cached`): one prefill of
    the prompt, then one position per new token except the last, which is returned and never fed back. Without
    it: each new token is chosen from a forward over the whole sequence so far, the prompt and the tokens before
    it. See course_notes/23-kv-cache.md, exercise 3."""
    raise NotImplementedError('lesson 23: write tokens_processed() in exercises/lesson_23.py; '
                              'see course_notes/23-kv-cache.md, exercise 3')
