"""Choosing the next token from the logits: greedy, or a draw shaped by temperature, top-k and top-p.

The model gives one logit per vocabulary entry; softmax turns them into probabilities. Then:

* temperature 0: greedy, the most likely token (argmax), the same text every time;
* temperature T > 0 divides the logits first: T < 1 sharpens the distribution towards the likeliest tokens,
  T > 1 flattens it;
* top-k keeps the k likeliest tokens only, so a long tail of unlikely ones cannot be drawn;
* top-p (nucleus sampling) keeps the fewest likeliest tokens whose probabilities add up to at least p: few when
  the model is sure, many when it is not.

They apply in that order (temperature, top-k, top-p, as transformers does), the kept probabilities are
normalised to sum to 1, and one token is drawn with numpy's Generator, so a seed reproduces a text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiper.core.errors import ConfigError


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 0.0
    top_k: int = 0       # 0: every token
    top_p: float = 1.0   # 1: every token

    def __post_init__(self):
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            raise ConfigError(f"temperature={t!r}: give a number >= 0 (0 is greedy)")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"top_k={k!r}: give a whole number >= 0 (0 keeps every token)")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise ConfigError(f"top_p={p!r}: give a number in (0, 1] (1 keeps every token)")


def generator(seed: int | None) -> np.random.Generator:
    """numpy's Generator for `seed` (None: fresh entropy), a ConfigError for a seed it cannot take."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ConfigError(f"seed={seed!r}: give a whole number >= 0")
    return np.random.default_rng(seed)


def probabilities(logits: np.ndarray, options: SamplingOptions) -> np.ndarray:
    """The distribution a token is drawn from, (vocab,) float64: zero outside top-k and top-p. Not for greedy."""
    # the largest logit subtracted first: a temperature so small that logit / T overflows then leaves the
    # likeliest tokens at 0 and the rest at -inf, where dividing first would give inf - inf
    with np.errstate(over="ignore"):
        z = (logits.astype(np.float64) - logits.max()) / options.temperature
    if 0 < options.top_k < z.size:
        # the k-th largest logit; ties at that value all stay, as with transformers' threshold
        threshold = np.partition(z, z.size - options.top_k)[z.size - options.top_k]
        z[z < threshold] = -np.inf
    p = np.exp(z)  # each at most 1: the largest z is 0
    p /= p.sum()
    if options.top_p < 1:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]  # the probability of the tokens likelier than each one
        p[order[before >= options.top_p]] = 0    # the likeliest token always stays (before = 0)
        p /= p.sum()
    return p


def next_token(logits: np.ndarray, options: SamplingOptions, rng: np.random.Generator) -> int:
    """One token id from the logits of the last position."""
    if options.temperature == 0:
        return int(np.argmax(logits))
    p = probabilities(logits, options)
    return int(rng.choice(p.size, p=p))
