"""Lesson 24: Sampling. Reference solutions."""

import numpy as np


def top_k_filter(logits, k: int):
    """A float64 copy of `logits` (vocab,) in which every value below the k-th largest is -inf, so that only the
    k likeliest tokens can be drawn; tokens tied with the k-th largest all stay. k = 0, or k >= the vocabulary,
    keeps every token. See course_notes/24-sampling.md, exercise 1."""
    z = np.array(logits, dtype=np.float64)
    if 0 < k < z.size:
        kth = np.sort(z)[::-1][k - 1]
        z[z < kth] = -np.inf
    return z


def top_p_filter(probs, p: float):
    """Nucleus filtering of a distribution `probs` (vocab,), summing to 1: order the tokens from the likeliest
    down (ties in index order, a stable sort), keep each token while the probabilities of the tokens before it sum
    to less than p (so the likeliest always stays, and the kept ones are the fewest whose sum reaches p), set the
    rest to 0, and divide by the kept sum. p = 1 keeps every token. Returns float64.
    See course_notes/24-sampling.md, exercise 2."""
    probs = np.array(probs, dtype=np.float64)
    if p >= 1:
        return probs
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]
    probs[order[before >= p]] = 0.0
    return probs / probs.sum()


def sample(logits, temperature: float, top_k: int, top_p: float, rng) -> int:
    """The next token from `logits` (vocab,). temperature 0: the argmax (greedy). Otherwise divide the logits by
    the temperature (in float64), keep the top_k (top_k_filter), softmax, keep the nucleus (top_p_filter), and draw
    one token with `rng.choice(vocab, p=probabilities)` (a numpy Generator), as kuiper does, so that the same seed
    draws the same tokens. See course_notes/24-sampling.md, exercise 3."""
    if temperature == 0:
        return int(np.argmax(logits))
    z = top_k_filter(np.asarray(logits, np.float64) / temperature, top_k)
    probs = np.exp(z - z.max())
    probs = top_p_filter(probs / probs.sum(), top_p)
    return int(rng.choice(probs.size, p=probs))


def generate(forward, prompt, max_new_tokens: int, eos_ids, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, seed=None) -> list:
    """The generation loop: `forward(ids, start)` returns the logits (len(ids), vocab) of ids at positions start,
    start + 1, ... (continuing the sequence the model's cache holds; start = 0 begins it). Prefill the prompt, then
    per new token: choose it with `sample` from the last row of logits, using one numpy Generator made from `seed`
    (np.random.default_rng(seed)); stop without it if it is in `eos_ids`; keep it; stop after max_new_tokens
    tokens; otherwise run it through `forward` at the next position. Returns the new tokens (the prompt not
    included). See course_notes/24-sampling.md, exercise 4."""
    rng = np.random.default_rng(seed)
    logits = forward(list(prompt), 0)[-1]
    position, new = len(prompt), []
    while len(new) < max_new_tokens:
        token = sample(logits, temperature, top_k, top_p, rng)
        if token in eos_ids:
            break
        new.append(token)
        if len(new) == max_new_tokens:
            break
        logits = forward([token], position)[-1]
        position += 1
    return new
