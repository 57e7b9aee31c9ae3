"""Packed steps padded up to a few lengths, as a language model pads them where the backend replays forwards
(OpenCL): the ladder of lengths, the padding's spans in a block of its own, and each sequence's logits and KV
cache, and a scheduler's tokens, equal to those without padding. The numpy backends are told they replay, so
that the padding runs there too."""

import numpy as np
import pytest

import kuiper.llm
from conftest import MODELS, OPENCL_DEVICES
from kuiper.layers.pages import BLOCK_SIZE
from kuiper.llm.paged import LARGEST_BUCKET, PAD_ID, BlockPool, Sequence, bucket, pack
from kuiper.llm.scheduler import Generation, Scheduler
from kuiper.runtime.executor import NumpyExecutor

TINY = MODELS / "llm" / "llama_gqa"
BACKENDS = [("numpy", None), ("reference", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]


def test_the_ladder_pads_by_less_than_half_and_meets_few_lengths():
    lengths = [bucket(t) for t in range(1, LARGEST_BUCKET + 1)]
    assert lengths[:4] == [1, 2, 3, 4]
    assert sorted(set(lengths)) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    for tokens, padded in enumerate(lengths, 1):
        assert tokens <= padded < 1.5 * tokens, tokens
        assert bucket(padded) == padded  # a bucket is its own
    assert all(a <= b for a, b in zip(lengths, lengths[1:]))
    assert bucket(LARGEST_BUCKET + 1) == LARGEST_BUCKET + 1  # past the ladder: as it is


def test_padding_rows_sit_in_the_scratch_block_alone():
    pool = BlockPool(4)
    a, b = Sequence(pool), Sequence(pool)
    a.reserve(20)
    a.length = 18
    entries = [(a, [5]), (b, list(range(10, 23)))]  # 14 tokens, padded to 40: 26 rows in spans of 16 and 10
    plain_ids, plain_positions, plain = pack(entries)
    ids, positions, layout = pack(entries, 40, scratch=4)
    assert ids.shape == (1, 40) and ids[0, :14].tolist() == plain_ids[0].tolist()
    assert (ids[0, 14:] == PAD_ID).all()
    assert positions.tolist() == plain_positions.tolist() + list(range(16)) + list(range(10))
    assert layout.spans[:2] == plain.spans
    assert [(s.first, s.count, s.start, s.table) for s in layout.spans[2:]] == [(14, 16, 0, (4,)), (30, 10, 0, (4,))]
    np.testing.assert_array_equal(layout.slots[:14], plain.slots)
    assert set(layout.slots[14:].tolist()) == set(range(4 * BLOCK_SIZE, 5 * BLOCK_SIZE))  # the scratch block only
    assert (a.table, b.table, pool.held) == ([0, 1], [2], 3)  # the padding takes nothing from the pool


@pytest.fixture
def replaying(monkeypatch):
    """The numpy backends told that they replay forwards: the language models loaded then pad their steps."""
    monkeypatch.setattr(NumpyExecutor, "replays", True)


def pool_contents(lm) -> list:
    """Every attention layer's keys and values, each (2, kv_heads, slots, head_dim), downloaded on OpenCL."""
    from kuiper.opencl import DeviceTensor

    contents = []
    for layer in lm.attention:
        if lm.graph.executor.name == "opencl":
            rt, shape = layer.cl_runtime, (layer.num_kv_heads, layer.cl_slots, layer.head_dim)
            contents.append(np.stack([DeviceTensor(rt, b, shape, rt.stored(np.float32)).numpy() for b in layer.pool]))
        else:
            contents.append(np.stack(layer.pool))
    return contents


@pytest.mark.filterwarnings("ignore:.*no OpenCL forward")
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_a_padded_step_gives_each_sequence_its_logits_and_cache_alone(replaying, backend, device):
    """Prompts packed, then decode steps beside a prompt's chunk, each step padded to its bucket: each
    sequence's logits are those of forwards of it alone, unpadded, and the pool's blocks other than the scratch
    block hold what the unpadded forwards wrote there."""
    lm = kuiper.llm.load(TINY, backend=backend, device=device, cache_tokens=256)
    assert lm.scratch == lm.cache_blocks and lm.pool_blocks == lm.cache_blocks + 1
    prompts = [lm.tokenizer.encode(text) for text in ("Once upon a time", "The robot read every book",
                                                      "It was the best of times")]
    steps = [list(zip(range(3), prompts)), [(0, [7]), (1, [8]), (2, [9, 10, 11, 12, 13, 14, 15])]]
    lengths = [sum(len(ids) for _, ids in step) for step in steps]
    assert all(bucket(n) > n for n in lengths)  # both steps padded
    results, pools = {}, {}
    for padded in (False, True):
        lm.scratch = lm.cache_blocks if padded else None
        sequences = [Sequence(lm.blocks) for _ in prompts]
        results[padded] = [lm.forward_packed([(sequences[i], ids) for i, ids in step]) for step in steps]
        pools[padded] = pool_contents(lm)
        met = [key[0][0] for key in lm.graph.plans][-2:]  # the tokens' shape of the last two plans used
        assert met == [(1, bucket(n) if padded else n) for n in lengths]
        assert [s.length for s in sequences] == [len(prompts[0]) + 1, len(prompts[1]) + 1, len(prompts[2]) + 7]
        written = np.concatenate([(np.repeat(s.table, BLOCK_SIZE) * BLOCK_SIZE + np.tile(np.arange(BLOCK_SIZE),
                                                                                       len(s.table)))[:s.length]
                                  for s in sequences])
        for s in sequences:
            s.release()
    for step_plain, step_padded in zip(results[False], results[True]):
        for plain, padded in zip(step_plain, step_padded):
            assert padded.shape == plain.shape
            np.testing.assert_allclose(padded, plain, rtol=0, atol=1e-4 * np.abs(plain).max())
    others = np.setdiff1d(np.arange(lm.cache_blocks * BLOCK_SIZE), written)  # the pool's other slots, scratch's aside
    for plain, padded in zip(pools[False], pools[True]):
        np.testing.assert_allclose(padded[:, :, written], plain[:, :, written], rtol=0,
                                   atol=1e-4 * np.abs(plain[:, :, written]).max())
        # as the unpadded forwards left them (on OpenCL, whatever the memory held: compared bit for bit)
        np.testing.assert_array_equal(padded[:, :, others].view(np.uint32), plain[:, :, others].view(np.uint32))


@pytest.mark.parametrize("backend, device", [("numpy", None)] + [("opencl", spec) for spec in OPENCL_DEVICES])
def test_a_scheduler_padding_its_steps_gives_each_request_its_tokens_alone(replaying, monkeypatch, backend, device):
    """Nine greedy requests through a scheduler whose steps hold 12 tokens at most: prompts in chunks beside
    decode steps, packed lengths from 1 to 12, padded to 6, 8 or 12 with padding rows beside the sequences; each
    request's tokens are those of LanguageModel.generate for it alone (unpadded)."""
    lm = kuiper.llm.load(MODELS / "shakespeare", backend=backend, device=device, cache_tokens=2048)
    prompts = ["ROMEO:", "JULIET: O Romeo, Romeo", "First Citizen:\nBefore we proceed any further, hear me speak.",
               "KING HENRY", "To be, or not to be", "HAMLET: What a piece of work is man"]
    requests = [(lm.tokenizer.encode(prompts[i % len(prompts)]), 4 + 3 * i) for i in range(9)]
    alone = [lm.generate(ids, max_new_tokens=n) for ids, n in requests]
    packed = []

    def counting(entries, padded=0, scratch=None):
        packed.append((sum(len(ids) for _, ids in entries), padded))
        return pack(entries, padded, scratch)

    monkeypatch.setattr(kuiper.llm.model, "pack", counting)
    scheduler = Scheduler(lm, max_batch=8, step_tokens=12)
    try:
        generations = [scheduler.submit(Generation(ids, n)) for ids, n in requests]
        for generation in generations:
            while generation.finish_reason is None:
                scheduler.thread.join(0.01)
    finally:
        scheduler.close()
    assert [g.tokens for g in generations] == alone
    assert all(padded == bucket(tokens) for tokens, padded in packed)
    assert sum(padded > tokens for tokens, padded in packed) >= 5  # steps with padding rows beside sequences
    assert lm.blocks.held == len(lm.sequence.table)
