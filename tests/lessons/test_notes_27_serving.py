"""The claims of lesson 27: a pack's ids, positions and spans; blocks taken as sequences grow, lowest first, given
back when they end, a sequence alone reading one slice; the memory a paged cache holds against whole-context
reservations; steps padded to a few lengths where forwards replay, not on numpy; a sequence's tokens the same
packed or alone; the scheduler's steps, promises and stop strings; the commands in the notes."""

import sys
import time

import numpy as np
import pytest

import kuiper.llm
from kuiper.layers.pages import BLOCK_SIZE, blocks_for
from kuiper.llm.paged import BUCKETS, BlockPool, Sequence, bucket, pack
from kuiper.llm.scheduler import Generation, Scheduler
from lesson_tools import ROOT, check_shell_commands

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lesson27") / "tiny"
    write_checkpoint(directory, max_position_embeddings=128)
    model = kuiper.llm.load(directory, cache_tokens=512, backend="numpy")
    model.eos_token_ids = frozenset()  # random weights: let every generation run its length
    return model


def test_a_pack_puts_each_sequence_at_its_own_positions():
    pool = BlockPool(4)
    old, new = Sequence(pool), Sequence(pool)
    old.reserve(9)
    old.length = 9
    ids, positions, layout = pack([(old, [4]), (new, [1, 2, 3])])
    assert ids.tolist() == [[4, 1, 2, 3]] and positions.tolist() == [9, 0, 1, 2]
    assert [(s.first, s.count, s.start, s.table) for s in layout.spans] == [(0, 1, 9, (0,)), (1, 3, 0, (1,))]
    assert layout.slots.tolist() == [9, 16, 17, 18]               # slot = table[p // 16] * 16 + p % 16
    assert old.length == 9                                         # the caller advances the lengths


def test_steps_are_padded_to_two_lengths_an_octave_where_forwards_replay(lm):
    assert lm.scratch is None and lm.pool_blocks == lm.cache_blocks  # numpy: no padding, no scratch block
    octaves = [[b for b in BUCKETS if 2 ** k < b <= 2 ** (k + 1)] for k in range(2, 9)]
    assert all(len(lengths) == 2 for lengths in octaves)
    assert [bucket(n) for n in (5, 13, 53)] == [6, 16, 64]


def test_memory_follows_the_tokens(lm):
    sequences = [Sequence(lm.blocks) for _ in range(3)]
    lm.sequence.release()
    lengths = [5, 17, 40]
    lm.forward_packed([(s, [1] * n) for s, n in zip(sequences, lengths)])
    assert lm.blocks.held == sum(blocks_for(n) for n in lengths) == 1 + 2 + 3
    lm.forward_packed([(s, [2]) for s in sequences])               # 18 and 41 need no new block; 6 neither
    assert lm.blocks.held == 6
    for s in sequences:
        s.release()
    assert lm.blocks.held == 0 and sorted(lm.blocks.free) == list(range(lm.blocks.blocks))


def test_a_sequence_alone_reads_one_slice(lm):
    lm.reset()
    lm.logits(list(range(3, 40)))
    assert lm.sequence.table == [0, 1, 2]
    layout = pack([(lm.sequence, [5])])[2]
    assert layout.reads[0] == slice(0, 38)
    lm.reset()


def test_the_notes_memory_figures():
    per_token = 2 * 4 * 4 * 32 * 4                                 # the shipped model: layers, KV heads, head_dim
    assert 16 * 256 * per_token == 16 * 2 ** 20
    assert 16 * blocks_for(100) * BLOCK_SIZE * per_token == 7 * 2 ** 20


def test_packed_or_alone_the_same_tokens(lm):
    prompts = [list(range(5, 5 + n)) for n in (3, 11, 20)]
    alone = [lm.generate(p, max_new_tokens=6) for p in prompts]
    scheduler = Scheduler(lm, max_batch=3)
    try:
        with scheduler.wake:                                       # the loop admits none until all are queued
            runs = [scheduler.submit(Generation(p, 6)) for p in prompts]
        while any(r.finish_reason is None for r in runs):
            time.sleep(0.01)
    finally:
        scheduler.close()
    assert [r.tokens for r in runs] == alone
    assert scheduler.steps == 6 < sum(len(a) for a in alone)      # one step for the prompts, then one a token


def test_admission_promises_the_worst_case(lm):
    generation = Generation([1] * 20, 13)
    assert generation.promised == blocks_for(20 + 13 - 1) == 2     # the last token is never fed back


def test_text_is_held_back_while_it_may_begin_a_stop_string():
    out = []
    generation = Generation([1], 5, stop=["END"], deliver=lambda piece, finish: out.append(piece))
    assert not generation.text_out("the E", final=False) and out == ["the "]
    assert not generation.text_out("N", final=False) and out == ["the "]
    assert generation.text_out("D and more", final=False) and out == ["the "]
    generation = Generation([1], 5, stop=["END"], deliver=lambda piece, finish: out.append(piece))
    assert not generation.text_out("EN", final=True) and out[-1] == "EN"


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(27, capsys)
