"""Continuous batching without HTTP: generations of different lengths, submitted while others run, give the tokens
LanguageModel.generate gives for each alone (greedy, and seeded sampling); stop strings, cancellation, the
queue's bound, admission by the pool's blocks, and requests that can never fit."""

import threading

import pytest

import kuiper.llm
import kuiper.llm.scheduler as scheduler_module
from conftest import MODELS
from kuiper.core.errors import InputError
from kuiper.llm.sampling import SamplingOptions
from kuiper.llm.scheduler import Generation, QueueFull, Scheduler

SHAKESPEARE = MODELS / "shakespeare"
PROMPTS = ["ROMEO:", "JULIET: O Romeo, Romeo", "First Citizen:\nBefore we proceed any further, hear me speak.",
           "KING HENRY", "To be, or not to be", "HAMLET: What a piece of work is man"]


@pytest.fixture(scope="module")
def lm():
    return kuiper.llm.load(SHAKESPEARE, cache_tokens=2048, backend="numpy")


class Collector:
    """A Generation's deliver(): the pieces of text and the finish reason, and an event set at the end."""

    def __init__(self):
        self.pieces, self.finish, self.done = [], None, threading.Event()

    def __call__(self, piece, finish):
        self.pieces.append(piece)
        if finish:
            self.finish = finish
            self.done.set()

    @property
    def text(self):
        return "".join(self.pieces)


def run_all(scheduler, generations, timeout=60):
    collectors = []
    for generation in generations:
        generation.deliver = collector = Collector()
        collectors.append(collector)
        scheduler.submit(generation)
    for collector in collectors:
        assert collector.done.wait(timeout)
    return collectors


def test_batched_generations_are_each_what_it_gives_alone(lm):
    requests = [(PROMPTS[i % len(PROMPTS)], 4 + 3 * i) for i in range(12)]
    alone = [lm.generate(lm.tokenizer.encode(p), max_new_tokens=n) for p, n in requests]
    seeded = dict(temperature=0.9, top_p=0.9, seed=7)
    sampled_alone = lm.generate(lm.tokenizer.encode(PROMPTS[2]), max_new_tokens=30, **seeded)
    scheduler = Scheduler(lm, max_batch=8, step_tokens=12)  # fewer than the requests; prompts in chunks of a few
    try:
        generations = [Generation(lm.tokenizer.encode(p), n) for p, n in requests]
        sampled = Generation(lm.tokenizer.encode(PROMPTS[2]), 30, SamplingOptions(0.9, 0, 0.9), seed=7)
        assert max(len(g.ids) for g in generations) > 12  # a step holds 12 tokens: that prompt goes in chunks
        collectors = run_all(scheduler, generations + [sampled])
        assert scheduler.steps < sum(n for _, n in requests)  # batched: far fewer steps than tokens
    finally:
        scheduler.close()
    for (prompt, n), generation, collector, expected in zip(requests, generations, collectors, alone):
        assert generation.tokens == expected, prompt
        assert collector.finish == ("length" if len(expected) == n else "stop")
        assert collector.text == lm.tokenizer.decode(expected, skip_special_tokens=True)
    assert sampled.tokens == sampled_alone
    assert lm.blocks.held == len(lm.sequence.table)  # every generation gave its blocks back


def test_stop_strings_end_the_text_before_them(lm):
    ids = lm.tokenizer.encode(PROMPTS[0])
    full = lm.tokenizer.decode(lm.generate(ids, max_new_tokens=40), skip_special_tokens=True)
    stop = full[10:13]  # three characters from inside the text, likely split across tokens
    scheduler = Scheduler(lm)
    try:
        generation = Generation(ids, 40, stop=["never in this text \u2603", stop])
        (collector,) = run_all(scheduler, [generation])
    finally:
        scheduler.close()
    assert collector.finish == "stop"
    assert collector.text == full[:full.index(stop)]


def test_a_generation_whose_sampling_fails_ends_alone(lm, monkeypatch):
    ids = lm.tokenizer.encode(PROMPTS[1])
    expected = lm.generate(ids, max_new_tokens=20)
    sample = scheduler_module.next_token

    def failing(logits, options, rng):  # a sampler that fails for one generation's options
        if options.temperature == 0.5:
            raise ValueError("this sampler fails")
        return sample(logits, options, rng)

    monkeypatch.setattr(scheduler_module, "next_token", failing)
    scheduler = Scheduler(lm)
    try:
        good, bad = Generation(ids, 20, deliver=Collector()), Generation(ids, 20, SamplingOptions(0.5),
                                                                          deliver=Collector())
        with scheduler.wake:  # admitted together, so their first step is the same
            scheduler.submit(good)
            scheduler.submit(bad)
        assert good.deliver.done.wait(60) and bad.deliver.done.wait(60)
    finally:
        scheduler.close()
    assert bad.deliver.finish == "error" and scheduler.error == "ValueError: this sampler fails"
    assert good.deliver.finish == "length" and good.tokens == expected
    assert lm.blocks.held == len(lm.sequence.table)


def test_cancelled_generations_give_their_blocks_back_at_once(lm):
    scheduler = Scheduler(lm, max_batch=2, max_queue=2)
    try:
        started = threading.Event()
        long = Generation(lm.tokenizer.encode(PROMPTS[1]), 200,
                          deliver=lambda piece, finish: piece and started.set())
        scheduler.submit(long)
        assert started.wait(30)
        assert lm.blocks.held > len(lm.sequence.table)
        waiting = [scheduler.submit(Generation([1, 2, 3], 5)) for _ in range(2)]  # the batch has room: admitted
        with pytest.raises(QueueFull, match="queue holds 2"):
            for _ in range(5):  # one more may start beside the long one; at most two wait
                scheduler.submit(Generation([1, 2, 3], 200))
        scheduler.cancel(long)
        for generation in waiting:
            while generation.finish_reason is None:
                threading.Event().wait(0.01)
        while long.finish_reason is None:
            threading.Event().wait(0.01)
        assert long.finish_reason == "cancelled" and len(long.tokens) < 200
    finally:
        scheduler.close()
    assert lm.blocks.held == len(lm.sequence.table)


def test_admission_waits_for_the_blocks_a_generation_may_need(tmp_path):
    lm = kuiper.llm.load(SHAKESPEARE, context=64, backend="numpy")  # a pool of 64 positions: four blocks
    scheduler = Scheduler(lm, max_batch=4)
    try:
        generations = [Generation(lm.tokenizer.encode(PROMPTS[0]), 40) for _ in range(3)]  # 3 blocks each
        peak = []
        for generation in generations:
            generation.deliver = lambda piece, finish: peak.append(len(scheduler.running))
        for generation in generations:
            scheduler.submit(generation)
        while any(g.finish_reason is None for g in generations):
            threading.Event().wait(0.01)
        assert max(peak) == 1  # one at a time: two would need six blocks
        alone = lm.generate(lm.tokenizer.encode(PROMPTS[0]), max_new_tokens=40)
        assert all(g.tokens == alone for g in generations)
    finally:
        scheduler.close()


def test_requests_that_can_never_fit_are_refused(lm):
    scheduler = Scheduler(lm)
    try:
        with pytest.raises(InputError, match="make 260, more than the model's context of 256 positions"):
            scheduler.submit(Generation([1] * 200, 60))
        with pytest.raises(InputError, match="no tokens"):
            scheduler.submit(Generation([], 5))
        with pytest.raises(InputError, match="leave no room for a reply"):
            scheduler.submit(Generation([1] * 256, 0))
    finally:
        scheduler.close()
    with pytest.raises(InputError, match="max_batch=0"):
        Scheduler(lm, max_batch=0)


def test_many_generations_leave_nothing_behind(lm):
    """Sixty short generations of every prompt length: afterwards no block is held but generate()'s own, and the
    graph keeps no more plans than its bound, however many packed lengths it met."""
    scheduler = Scheduler(lm, max_batch=6)
    try:
        generations = [Generation(list(range(1, 2 + i % 40)), 1 + i % 7) for i in range(60)]
        run_all(scheduler, generations)
    finally:
        scheduler.close()
    assert all(g.finish_reason in ("length", "stop") for g in generations)
    assert lm.blocks.held == len(lm.sequence.table)
    assert len(lm.graph.plans) <= lm.graph.max_plans
    assert scheduler.running == [] and not scheduler.waiting and scheduler.promised == 0
