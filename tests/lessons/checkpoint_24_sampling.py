"""Checkpoint of lesson 24: the filters of exercises/lesson_24.py held to their definitions and to
kuiper.llm.sampling.probabilities; its sample held to kuiper's next_token draw for draw with the same seed, and
to the distribution it draws from; its generation loop held to kuiper.llm's generate on a tiny checkpoint, with
the same seed, the same options and the same end-of-sequence tokens."""

import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.llm.sampling import SamplingOptions, next_token, probabilities
from lesson_tools import ROOT, exercise

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

ex = exercise(24)
RNG = np.random.default_rng(24)


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.mark.parametrize("k", [0, 1, 3, 10, 49, 50, 200])
def test_top_k_filter_keeps_the_k_largest(k):
    logits = RNG.standard_normal(50) * 3
    got = ex.top_k_filter(logits, k)
    kept = np.flatnonzero(np.isfinite(got))
    expected = np.argsort(-logits)[:k] if 0 < k < 50 else np.arange(50)
    assert set(kept) == set(expected)
    np.testing.assert_array_equal(got[kept], logits[kept])
    assert set(kept) == set(np.flatnonzero(probabilities(logits, SamplingOptions(1.0, top_k=k))))


def test_top_k_filter_keeps_ties_at_the_kth():
    got = ex.top_k_filter(np.array([2.0, 1.0, 1.0, 0.0, 1.0]), 2)
    assert list(np.isfinite(got)) == [True, True, True, False, True]


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.8, 0.95, 0.999, 1.0])
def test_top_p_filter_is_kuipers(p):
    logits = RNG.standard_normal(40) * 2
    got = ex.top_p_filter(softmax(logits), p)
    np.testing.assert_allclose(got, probabilities(logits, SamplingOptions(1.0, top_p=p)), rtol=1e-12, atol=1e-15)
    kept = np.flatnonzero(got)
    full = softmax(logits)
    assert full[kept].sum() >= p - 1e-12                                      # reaches p ...
    assert len(kept) == 1 or full[kept].sum() - full[kept].min() < p          # ... and no token could go


def test_top_p_filter_keeps_the_likeliest_token_always():
    probs = np.array([0.9, 0.05, 0.05])
    np.testing.assert_array_equal(ex.top_p_filter(probs, 0.01), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(ex.top_p_filter(probs, 0.92), [0.9 / 0.95, 0.05 / 0.95, 0.0])   # a tie: by index
    halves = np.array([0.5, 0.25, 0.25])                                      # sums that reach p exactly
    np.testing.assert_array_equal(ex.top_p_filter(halves, 0.5), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(ex.top_p_filter(halves, 0.75), [2 / 3, 1 / 3, 0.0])
    np.testing.assert_array_equal(ex.top_p_filter(halves, 1.0), halves)


@pytest.mark.parametrize("options", [dict(temperature=0.0), dict(temperature=1.0), dict(temperature=0.7, top_k=5),
                                     dict(temperature=1.5, top_p=0.9), dict(temperature=0.8, top_k=20, top_p=0.6)],
                         ids=str)
def test_sample_draws_what_kuipers_next_token_draws(options):
    logits = RNG.standard_normal(300).astype(np.float32) * 2
    sampling = SamplingOptions(**options)
    full = dict(top_k=0, top_p=1.0) | options
    for seed in range(5):
        theirs, mine = np.random.default_rng(seed), np.random.default_rng(seed)
        expected = [next_token(logits, sampling, theirs) for _ in range(40)]
        got = [ex.sample(logits, full["temperature"], full["top_k"], full["top_p"], mine) for _ in range(40)]
        assert got == expected
        assert all(isinstance(t, int) for t in got)


def test_sample_follows_the_distribution():
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03]))
    rng = np.random.default_rng(5)
    counts = np.bincount([ex.sample(logits, 1.0, 0, 0.8, rng) for _ in range(20000)], minlength=5)
    expected = np.array([0.5, 0.25, 0.15, 0, 0]) / 0.9                        # top-p 0.8 keeps three
    np.testing.assert_allclose(counts / 20000, expected, atol=0.015)
    counts = np.bincount([ex.sample(logits, 0.5, 0, 1.0, rng) for _ in range(20000)], minlength=5)
    np.testing.assert_allclose(counts / 20000, softmax(logits / 0.5), atol=0.015)   # sharper at T < 1


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lesson24") / "tiny"
    write_checkpoint(directory)
    return kuiper.llm.load(directory, backend="numpy")


@pytest.mark.parametrize("options", [dict(), dict(temperature=1.0, seed=3), dict(temperature=0.8, top_k=40, seed=7),
                                     dict(temperature=1.2, top_p=0.9, seed=11)], ids=str)
def test_generate_is_kuipers(lm, options):
    prompt = lm.tokenizer.encode("Once upon a time")
    lm.eos_token_ids = frozenset()
    expected = lm.generate(prompt, max_new_tokens=20, **options)
    got = ex.generate(lm.forward, prompt, 20, frozenset(), **options)
    assert got == expected and len(got) == 20


def test_generate_stops_at_an_end_of_sequence_token(lm):
    prompt = lm.tokenizer.encode("The robot read")
    lm.eos_token_ids = frozenset()
    free = lm.generate(prompt, max_new_tokens=12, temperature=1.0, seed=2)
    stop = free[5]
    lm.eos_token_ids = frozenset({stop, 10**6})
    expected = lm.generate(prompt, max_new_tokens=12, temperature=1.0, seed=2)
    assert expected == free[:free.index(stop)]                               # the EOS itself is not returned
    assert ex.generate(lm.forward, prompt, 12, {stop, 10**6}, temperature=1.0, seed=2) == expected
    lm.eos_token_ids = frozenset()
