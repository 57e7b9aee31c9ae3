"""The claims of lesson 24: temperature, top-k (its ties), top-p (the fewest likeliest reaching p, the likeliest
always kept) and their order, against definitions written here; seeds and the draw; the options' checks; where the
end-of-sequence ids come from and which wins; the three ways generation stops; the command line's defaults."""

import json
import math
import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.app import cli
from kuiper.core.errors import ConfigError
from kuiper.llm.sampling import SamplingOptions, next_token, probabilities
from lesson_tools import ROOT, check_shell_commands

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

RNG = np.random.default_rng(2424)


def softmax(z):
    z = np.asarray(z, np.float64)
    e = [math.exp(v - max(z)) if v != -math.inf else 0.0 for v in z]
    return np.array(e) / math.fsum(e)


def nucleus(p, top_p):
    """The fewest likeliest tokens (ties by index) whose probabilities sum to at least top_p, renormalised."""
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    kept, total = [], 0.0
    for i in order:
        kept.append(i)
        total += p[i]
        if total >= top_p:
            break
    out = np.zeros(len(p))
    out[kept] = p[kept] / p[kept].sum()
    return out


def test_temperature_divides_the_logits_and_zero_is_the_limit():
    logits = RNG.standard_normal(30)
    for t in (0.25, 1.0, 3.0):
        np.testing.assert_allclose(probabilities(logits, SamplingOptions(t)), softmax(logits / t), rtol=1e-12)
    cold = probabilities(logits, SamplingOptions(0.01))
    assert cold.argmax() == logits.argmax() and cold.max() > 0.99
    assert next_token(logits, SamplingOptions(0.0), np.random.default_rng(0)) == int(logits.argmax())
    spread = [probabilities(logits, SamplingOptions(t)).max() for t in (0.5, 1.0, 2.0)]
    assert spread[0] > spread[1] > spread[2]                             # sharper below 1, flatter above


def test_top_k_keeps_ties_and_zero_keeps_all():
    logits = np.array([2.0, 1.0, 1.0, 0.0, 1.0])
    assert list(np.flatnonzero(probabilities(logits, SamplingOptions(1.0, top_k=2)))) == [0, 1, 2, 4]
    assert np.count_nonzero(probabilities(logits, SamplingOptions(1.0, top_k=0))) == 5
    np.testing.assert_allclose(probabilities(np.array([2.0, 1.0, 0.5, 0.0, -1.0]), SamplingOptions(1.0, top_k=2)),
                               [0.7310585786, 0.2689414214, 0, 0, 0], rtol=1e-9)


@pytest.mark.parametrize("top_p", [0.01, 0.2, 0.5, 0.9, 0.99])
def test_top_p_is_the_nucleus(top_p):
    logits = RNG.standard_normal(25) * 2
    np.testing.assert_allclose(probabilities(logits, SamplingOptions(1.0, top_p=top_p)),
                               nucleus(softmax(logits), top_p), rtol=1e-12, atol=1e-15)
    assert probabilities(logits, SamplingOptions(1.0, top_p=top_p))[int(logits.argmax())] > 0


def test_the_filters_apply_in_order_temperature_top_k_top_p():
    logits = RNG.standard_normal(40) * 2
    t, k, p = 0.7, 10, 0.8
    z = logits / t
    z = np.where(z >= np.sort(z)[-k], z, -np.inf)
    expected = nucleus(softmax(z), p)
    np.testing.assert_allclose(probabilities(logits, SamplingOptions(t, top_k=k, top_p=p)), expected, rtol=1e-12,
                               atol=1e-15)


def test_confidence_decides_how_many_top_p_keeps():
    sure, unsure = np.array([6.0, 2.0, 1.0, 0.5, 0.0]), np.array([1.0, 0.9, 0.8, 0.7, 0.6])
    assert [np.count_nonzero(probabilities(z, SamplingOptions(1.0, top_p=0.9))) for z in (sure, unsure)] == [1, 5]


def test_a_draw_is_one_choice_of_the_generator():
    logits = RNG.standard_normal(100)
    options = SamplingOptions(0.9, top_k=30, top_p=0.9)
    mine, theirs = np.random.default_rng(8), np.random.default_rng(8)
    p = probabilities(logits, options)
    assert [next_token(logits, options, theirs) for _ in range(30)] == [int(mine.choice(100, p=p)) for _ in range(30)]


@pytest.mark.parametrize("options, message", [
    (dict(top_p=0), "top_p=0: give a number in (0, 1]"), (dict(temperature=-1.0), "temperature=-1.0"),
    (dict(top_k=-2), "top_k=-2: give a whole number >= 0"), (dict(top_p=1.5), "top_p=1.5"),
])
def test_the_options_are_checked(options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("]", r"\]")):
        SamplingOptions(**options)


def test_where_the_end_of_sequence_ids_come_from(tmp_path):
    write_checkpoint(tmp_path / "config", eos_token_id=[1, 7])
    assert kuiper.llm.load(tmp_path / "config", backend="numpy").eos_token_ids == {1, 7}
    write_checkpoint(tmp_path / "generation", eos_token_id=1)
    (tmp_path / "generation" / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 11]}))
    assert kuiper.llm.load(tmp_path / "generation", backend="numpy").eos_token_ids == {9, 11}  # generation_config.json wins
    write_checkpoint(tmp_path / "tokenizer", eos_token_id=None)
    assert kuiper.llm.load(tmp_path / "tokenizer", backend="numpy").eos_token_ids == {1}  # the tokenizer's </s>


def test_generation_stops_at_eos_max_new_tokens_or_the_context(tmp_path):
    write_checkpoint(tmp_path / "m")
    lm = kuiper.llm.load(tmp_path / "m", backend="numpy")
    prompt = lm.tokenizer.encode("Once upon a time")
    lm.eos_token_ids = frozenset()
    free = lm.generate(prompt, max_new_tokens=30, temperature=1.0, seed=4)
    assert len(free) == 30
    lm.eos_token_ids = frozenset({free[3]})
    stopped = lm.generate(prompt, max_new_tokens=30, temperature=1.0, seed=4)
    assert stopped == free[:free.index(free[3])] and free[3] not in stopped
    lm = kuiper.llm.load(tmp_path / "m", context=20, backend="numpy")
    lm.eos_token_ids = frozenset()
    assert len(lm.generate(prompt, max_new_tokens=30, temperature=1.0, seed=4)) == 20 - len(prompt) + 1


def test_the_command_lines_defaults():
    args = cli._parser().parse_args(["generate", "--prompt", "x"])
    assert (args.temperature, args.top_p, args.top_k, args.max_new_tokens, args.seed) == (0.8, 0.95, 0, 128, None)
    args = cli._parser().parse_args(["chat", "somewhere"])
    assert (args.temperature, args.top_p, args.top_k) == (0.8, 0.95, 0)
    generate = kuiper.llm.LanguageModel.generate.__defaults__
    assert generate == (32, 0.0, 0, 1.0, None)                     # greedy, no filter: not the command's


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(24, capsys)
