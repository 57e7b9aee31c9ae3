"""Sampling against direct computations: greedy is argmax; temperature divides the logits; top-k keeps the k
largest; top-p keeps the shortest run of likeliest tokens reaching p; draws follow the distribution; a seed
reproduces them."""

import numpy as np
import pytest

from kuiper.core.errors import ConfigError
from kuiper.llm.sampling import SamplingOptions, generator, next_token, probabilities

RNG = np.random.default_rng(7)


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_greedy_is_argmax():
    for _ in range(20):
        logits = RNG.standard_normal(50).astype(np.float32)
        assert next_token(logits, SamplingOptions(), np.random.default_rng(0)) == int(np.argmax(logits))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_divides_the_logits(temperature):
    logits = RNG.standard_normal(30)
    np.testing.assert_allclose(probabilities(logits, SamplingOptions(temperature)), softmax(logits / temperature),
                               rtol=1e-12)


@pytest.mark.parametrize("k", [1, 3, 10, 29, 30, 100])
def test_top_k_keeps_the_k_largest(k):
    logits = RNG.standard_normal(30)
    p = probabilities(logits, SamplingOptions(1.0, top_k=k))
    largest = sorted(range(30), key=lambda i: -logits[i])[:k]
    assert set(np.flatnonzero(p)) == set(largest)
    expected = softmax(logits[largest])
    np.testing.assert_allclose(p[largest], expected, rtol=1e-12)


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.5, 0.9, 0.999, 1.0])
def test_top_p_keeps_the_shortest_run_reaching_p(top_p):
    logits = RNG.standard_normal(40) * 2
    full = softmax(logits)
    order = sorted(range(40), key=lambda i: -full[i])
    kept, total = [], 0.0
    for i in order:  # the likeliest first, until their probabilities reach top_p
        kept.append(i)
        total += full[i]
        if total >= top_p:
            break
    p = probabilities(logits, SamplingOptions(1.0, top_p=top_p))
    assert set(np.flatnonzero(p)) == set(kept)
    np.testing.assert_allclose(p[kept], full[kept] / full[kept].sum(), rtol=1e-12)


def test_top_k_then_top_p():
    logits = np.array([3.0, 2.5, 2.0, 1.0, 0.5, 0.0])
    p = probabilities(logits, SamplingOptions(1.0, top_k=4, top_p=0.7))
    four = softmax(logits[:4])
    assert four[0] < 0.7 <= four[0] + four[1]  # so top-p keeps two of the four
    np.testing.assert_allclose(p, np.r_[four[:2] / four[:2].sum(), 0, 0, 0, 0], rtol=1e-12)


def test_ties_at_the_kth_logit_all_stay():
    p = probabilities(np.array([2.0, 1.0, 1.0, 0.0]), SamplingOptions(1.0, top_k=2))
    assert np.count_nonzero(p) == 3


@pytest.mark.parametrize("temperature", [1e-300, 5e-324])
def test_a_vanishing_temperature_is_greedy(temperature):
    """logits / T overflows to inf for these: the distribution must still be the argmax's (ties shared)."""
    logits = RNG.standard_normal(64).astype(np.float32)
    p = probabilities(logits, SamplingOptions(temperature, top_k=8, top_p=0.5))
    np.testing.assert_array_equal(p, np.eye(64)[np.argmax(logits)])
    tied = np.array([1.0, 3.0, -2.0, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(probabilities(tied, SamplingOptions(temperature)), [0, 0.5, 0, 0.5])


def test_draws_follow_the_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(3)
    counts = np.bincount([next_token(logits, SamplingOptions(1.0), rng) for _ in range(20000)], minlength=4)
    np.testing.assert_allclose(counts / 20000, [0.5, 0.3, 0.15, 0.05], atol=0.015)


def test_a_seed_reproduces_the_draws():
    logits = RNG.standard_normal(100)
    options = SamplingOptions(0.9, top_k=50, top_p=0.95)

    def draws(seed):
        rng = np.random.default_rng(seed)
        return [next_token(logits, options, rng) for _ in range(50)]

    assert draws(11) == draws(11)
    assert draws(11) != draws(12)


@pytest.mark.parametrize("options, message", [
    (dict(temperature=-0.1), "temperature=-0.1"), (dict(temperature=float("inf")), "temperature=inf"),
    (dict(top_k=1.5), "top_k=1.5"), (dict(top_p=0), "top_p=0"), (dict(top_p=True), "top_p=True"),
])
def test_bad_options(options, message):
    with pytest.raises(ConfigError, match=message):
        SamplingOptions(**options)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "7"])
def test_bad_seeds(seed):
    with pytest.raises(ConfigError, match="seed=.*: give a whole number >= 0"):
        generator(seed)
