"""Lesson 24: Sampling. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 24`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or the definitions in the notes.
"""

import numpy as np


def top_k_filter(logits, k: int):
    """A float64 copy of `logits` (vocab,) in which every value below the k-th largest is -inf, so that only the
    k likeliest tokens can be drawn; tokens tied with the k-th largest all stay. k = 0, or k >= the vocabulary,
    keeps every token. See course_notes/24-sampling.md, exercise 1."""
    raise NotImplementedError('lesson 24: write top_k_filter() in exercises/lesson_24.py; '
                              'see course_notes/24-sampling.md, exercise 1')


def top_p_filter(probs, p: float):
    """Nucleus filtering of a distribution `probs` (vocab,), summing to 1: order the tokens from the likeliest
    down (ties in index order, a stable sort), keep each token while the probabilities of the tokens before it sum
    to less than p (so the likeliest always stays, and the kept ones are the fewest whose sum reaches p), set the
    rest to 0, and divide by the kept sum. p = 1 keeps every token. Returns float64.
    See course_notes/24-sampling.md, exercise 2."""
    raise NotImplementedError('lesson 24: write top_p_filter() in exercises/lesson_24.py; '
                              'see course_notes/24-sampling.md, exercise 2')


def sample(logits, temperature: float, top_k: int, top_p: float, rng) -> int:
    """The next token from `logits` (vocab,). temperature 0: the argmax (greedy). Otherwise divide the logits by
    the temperature (in float64), keep the top_k (top_k_filter), softmax, keep the nucleus (top_p_filter), and draw
    one token with `rng.choice(vocab, p=probabilities)` (a numpy Generator), as kuiper does, so that the same seed
    draws the same tokens. See course_notes/24-sampling.md, exercise 3."""
    raise NotImplementedError('lesson 24: write sample() in exercises/lesson_24.py; '
                              'see course_notes/24-sampling.md, exercise 3')


def generate(forward, prompt, max_new_tokens: int, eos_ids, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, seed=None) -> list:
    """The generation loop: `forward(ids, start)` returns the logits (len(ids), vocab) of ids at positions start,
    start + 1, ... (continuing the sequence the model's cache holds; start = 0 begins it). Prefill the prompt, then
    per new token: choose it with `sample` from the last row of logits, using one numpy Generator made from `seed`
    (np.random.default_rng(seed)); stop without it if it is in `eos_ids`; keep it; stop after max_new_tokens
    tokens; otherwise run it through `forward` at the next position. Returns the new tokens (the prompt not
    included). See course_notes/24-sampling.md, exercise 4."""
    raise NotImplementedError('lesson 24: write generate() in exercises/lesson_24.py; '
                              'see course_notes/24-sampling.md, exercise 4')
