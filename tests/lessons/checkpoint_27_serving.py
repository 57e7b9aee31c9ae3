"""Checkpoint of lesson 27: the block allocator of exercises/lesson_27.py held to kuiper's (kuiper.llm.paged,
lowest free block first), its slots to kuiper's PageLayout, its packer to kuiper.llm.paged.pack, and its paged
attention, through scattered block tables, to kuiper's CachedAttention reading the same pool."""

import numpy as np
import pytest

from kuiper.layers.pages import PageLayout, Span
from kuiper.llm import paged
from kuiper.runtime.backends import make_layer
from lesson_tools import exercise

ex = exercise(27)
RNG = np.random.default_rng(27)


def test_take_blocks_takes_the_lowest_free_blocks_as_kuiper_does():
    pool = paged.BlockPool(8)
    mine = list(range(8))
    ours = [paged.Sequence(pool) for _ in range(3)]
    tables = [[], [], []]
    for who, positions in [(0, 5), (1, 17), (0, 16), (2, 40), (0, 33)]:
        ours[who].reserve(positions)
        ex.take_blocks(mine, tables[who], positions)
        assert tables[who] == ours[who].table, (who, positions)
    ours[1].release()
    mine += tables[1]
    tables[1] = []
    ours[1].reserve(20)
    ex.take_blocks(mine, tables[1], 20)
    assert tables[1] == ours[1].table
    assert sorted(mine) == sorted(pool.free)


def test_take_blocks_refuses_what_does_not_fit_and_changes_nothing():
    free, table = [3, 1], [0]
    with pytest.raises(MemoryError):
        ex.take_blocks(free, table, 4 * 16)
    assert (sorted(free), table) == ([1, 3], [0])
    ex.take_blocks(free, table, 16)  # holds them already
    assert (sorted(free), table) == ([1, 3], [0])
    ex.take_blocks(free, table, 4, block_size=2)
    assert table == [0, 1]


@pytest.mark.parametrize("table, start, count, block_size", [((4, 1, 7), 13, 10, 8), ((2,), 0, 16, 16),
                                                              ((5, 0, 3, 9), 30, 33, 16)])
def test_slots_are_kuipers(table, start, count, block_size):
    got = ex.slots(table, start, count, block_size)
    if block_size == 16:  # kuiper's block size
        layout = PageLayout([Span(0, 0, count, start, table)], 1, count)
        np.testing.assert_array_equal(got, layout.slots)
    p = np.arange(start, start + count)
    np.testing.assert_array_equal(got, [table[i // block_size] * block_size + i % block_size for i in p])


def test_pack_is_kuipers():
    pool = paged.BlockPool(16)
    lengths, new = [0, 21, 7], [[5, 6, 7], [8], [9, 10]]
    sequences = []
    for length in lengths:
        sequence = paged.Sequence(pool)
        sequence.reserve(length)
        sequence.length = length
        sequences.append(sequence)
    ids, positions, layout = paged.pack(list(zip(sequences, new)))
    got_ids, got_positions, spans = ex.pack(list(zip(lengths, new)))
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_positions, positions)
    assert got_ids.dtype == got_positions.dtype == np.int64
    assert [tuple(s) for s in spans] == [(s.first, s.count, s.start) for s in layout.spans]


@pytest.mark.parametrize("heads, kv_heads, start, tokens", [(4, 2, 0, 9), (4, 2, 21, 1), (6, 1, 30, 5),
                                                            (2, 2, 15, 2)])
def test_paged_attention_is_kuipers_cached_attention(heads, kv_heads, start, tokens):
    dim, blocks = 8, 6
    table = tuple(RNG.permutation(blocks)[:-(-(start + tokens) // 16)])  # scattered blocks
    layer = make_layer("kuiper.CachedAttention",
                       params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=96),
                       input_shapes=[(1, heads, tokens, dim), (1, kv_heads, tokens, dim), (1, kv_heads, tokens, dim),
                                     (tokens,)])
    layer.use_pool(blocks)
    if start:  # the positions before: one forward that fills them
        layer.use(PageLayout([Span(0, 0, start, 0, table)], 1, start))
        layer.run_numpy(RNG.standard_normal((1, heads, start, dim)).astype(np.float32),
                        *(RNG.standard_normal((1, kv_heads, start, dim)).astype(np.float32) for _ in range(2)),
                        np.arange(start))
    q = RNG.standard_normal((1, heads, tokens, dim)).astype(np.float32)
    k, v = (RNG.standard_normal((1, kv_heads, tokens, dim)).astype(np.float32) for _ in range(2))
    layer.use(PageLayout([Span(0, 0, tokens, start, table)], 1, tokens))
    (expected,) = layer.run_numpy(q, k, v, np.arange(start, start + tokens))
    pool_k, pool_v = (a.copy() for a in layer.pool)  # the new keys and values written, as the exercise says
    got = ex.paged_attention(q[0], pool_k, pool_v, table, start)
    assert got.shape == (heads, tokens, dim)
    np.testing.assert_allclose(got, expected[0], rtol=1e-5, atol=1e-5)
