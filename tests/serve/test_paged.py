"""The paged KV cache: the block allocator, the page layout, and attention through block tables against attention
over each sequence alone, written here as a loop (positions 0..p of the sequence's own keys), on the reference
and fast numpy layers and every usable OpenCL device; then a language model's packed forward against its
forwards of one sequence at a time."""

import math

import numpy as np
import pytest

import kuiper.llm
from conftest import FP16_RTOL, MODELS, OPENCL_DEVICES, assert_outputs_close
from kuiper.core.errors import InputError, MemoryLimitError
from kuiper.layers.pages import BLOCK_SIZE, PageLayout, Span
from kuiper.llm.paged import BlockPool, Sequence, pack
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(43)
TINY = MODELS / "llm" / "llama_gqa"


def data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_blocks_are_taken_lowest_first_and_given_back():
    pool = BlockPool(5)
    first, second = Sequence(pool), Sequence(pool)
    first.reserve(BLOCK_SIZE + 1)                        # two blocks for 17 positions
    second.reserve(1)
    assert (first.table, second.table, pool.held) == ([0, 1], [2], 3)
    first.reserve(2 * BLOCK_SIZE)                        # still two
    assert first.table == [0, 1]
    first.release()
    assert (first.table, first.length, pool.available) == ([], 0, 4)
    second.reserve(3 * BLOCK_SIZE)                       # the freed blocks, lowest first
    assert second.table == [2, 0, 1]
    with pytest.raises(MemoryLimitError, match="5 blocks of 16 positions are all held"):
        Sequence(pool).reserve(3 * BLOCK_SIZE)


def test_a_layout_places_each_token_by_its_sequences_table():
    spans = [Span(0, 0, 3, 15, (4, 1)), Span(0, 3, 2, 0, (2,))]
    layout = PageLayout(spans, 1, 5)
    np.testing.assert_array_equal(layout.positions, [[15, 16, 17, 0, 1]])
    # position 15 is the last of block 4; 16 and 17 the first of block 1
    np.testing.assert_array_equal(layout.slots, [4 * 16 + 15, 16, 17, 32, 33])
    assert isinstance(layout.reads[1], slice) and layout.reads[1] == slice(32, 34)
    np.testing.assert_array_equal(layout.reads[0], list(range(64, 80)) + [16, 17])
    with pytest.raises(InputError, match="two spans claim token 1"):
        PageLayout([Span(0, 0, 2, 0, (0,)), Span(0, 1, 1, 0, (1,))], 1, 2)
    with pytest.raises(InputError, match="without a sequence"):
        PageLayout([Span(0, 0, 1, 0, (0,))], 1, 2)
    with pytest.raises(InputError, match="holds 16 positions, not 17"):
        PageLayout([Span(0, 0, 2, 15, (0,))], 1, 2)


def attention_alone(q, k, v):
    """Causal GQA over one whole sequence, a loop over heads and positions in float64: q (H, n, D), k, v (KV, n, D)."""
    heads, tokens, dim = q.shape
    group = heads // k.shape[0]
    out = np.empty(q.shape)
    for h, i in np.ndindex(heads, tokens):
        keys, values = k[h // group, :i + 1].astype(np.float64), v[h // group, :i + 1].astype(np.float64)
        scores = keys @ q[h, i] / math.sqrt(dim)
        weights = np.exp(scores - scores.max())
        out[h, i] = weights / weights.sum() @ values
    return out


def layers(heads, kv_heads, dim, blocks):
    """(label, layer, run) for the reference layer, the fast CPU layer and the OpenCL layer on every device
    (the first at fp16 too), each holding a pool of `blocks` blocks."""
    from kuiper.opencl import get_runtime

    made = []
    params = dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=128)
    shapes = [(1, heads, 1, dim), (1, kv_heads, 1, dim), (1, kv_heads, 1, dim), (1,)]
    for backend in ("reference", "numpy"):
        layer = make_layer("kuiper.CachedAttention", backend=backend, params=params, input_shapes=shapes)
        made.append((backend, layer, layer.run_numpy, 1e-5))
    for spec in OPENCL_DEVICES:
        for precision in ("fp32", "fp16") if spec == OPENCL_DEVICES[0] else ("fp32",):
            rt = get_runtime(spec).at_precision(precision)
            layer = make_layer("kuiper.CachedAttention", backend="opencl", params=params, input_shapes=shapes)
            made.append((f"{spec} {precision}", layer, lambda *x, layer=layer, rt=rt: layer.run_opencl(rt, *x),
                         FP16_RTOL if precision == "fp16" else 1e-4))
    for _, layer, _, _ in made:
        layer.use_pool(blocks)
    return made


@pytest.mark.parametrize("heads, kv_heads, dim", [(4, 2, 16), (3, 1, 16), (4, 4, 16), (4, 2, 12)])
def test_packed_sequences_attend_through_their_block_tables_as_if_alone(heads, kv_heads, dim):
    """Three sequences: a pack of their prompts (the first in two chunks), then packed steps of one token or a
    few, their blocks handed out as they grow, interleaved; every step's output for each sequence is the rows of
    attention over that sequence alone. (head_dim 12: the OpenCL kernel a CPU runs for a head_dim that is not a
    multiple of 8.)"""
    check_packed_attention(heads, kv_heads, dim)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_the_gpu_kernel_reads_through_block_tables_too(monkeypatch):
    """With the runtimes told they are not CPUs, the GPU's kernel (a work-group a row, keys shared out among
    its work-items) runs here, through the same scattered tables."""
    from kuiper.opencl import get_runtime

    for spec in OPENCL_DEVICES:
        monkeypatch.setattr(get_runtime(spec), "is_cpu", False)
    check_packed_attention(4, 2, 16)


def check_packed_attention(heads, kv_heads, dim):
    lengths = [23, 7, 50]
    whole = [(data(heads, n, dim), data(kv_heads, n, dim), data(kv_heads, n, dim)) for n in lengths]
    expected = [attention_alone(*w) for w in whole]
    steps = [[(0, 0, 12), (1, 0, 5), (2, 0, 40)], [(0, 12, 9)], [(0, 21, 1), (1, 5, 1), (2, 40, 8)],
             [(2, 48, 2), (0, 22, 1), (1, 6, 1)]]
    for label, layer, run, rtol in layers(heads, kv_heads, dim, blocks=12):
        pool = BlockPool(12)
        sequences = [Sequence(pool) for _ in lengths]
        for step in steps:
            entries = [(sequences[s], [0] * count) for s, _, count in step]
            _, positions, layout = pack(entries)
            layer.use(layout)
            q, k, v = (np.concatenate([whole[s][i][:, start:start + count] for s, start, count in step], axis=1)[None]
                       for i in range(3))
            (out,) = run(q, k, v, positions)
            first = 0
            for s, start, count in step:
                got = out[0, :, first:first + count]
                assert_outputs_close([got], [expected[s][:, start:start + count].astype(np.float32)], rtol,
                                     f"{label}: sequence {s} at {start}")
                sequences[s].length += count
                first += count
        assert [s.table for s in sequences] == [[0, 5], [1], [2, 3, 4, 6]]  # taken as they grew: scattered


def test_the_layout_must_match_the_forward():
    layer = make_layer("kuiper.CachedAttention", params=dict(num_heads=2, num_kv_heads=1, head_dim=4, max_positions=8),
                       input_shapes=[(1, 2, 2, 4), (1, 1, 2, 4), (1, 1, 2, 4), (2,)])
    layer.use_pool(2)
    layer.use(PageLayout([Span(0, 0, 2, 0, (1,))], 1, 2))
    q, k, v = data(1, 2, 2, 4), data(1, 1, 2, 4), data(1, 1, 2, 4)
    with pytest.raises(InputError, match=r"the page layout is for 1 x 2 tokens at positions \[0, 1\]"):
        layer.run_numpy(q, k, v, np.array([3, 4]))
    layer.use(PageLayout([Span(0, 0, 2, 8, (0, 1))], 1, 2))
    with pytest.raises(InputError, match="position 9 is past the cache's max_positions=8"):
        layer.run_numpy(q, k, v, np.array([8, 9]))


@pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")
def test_a_layout_larger_than_the_pool_is_refused_on_opencl():
    """The OpenCL layer keeps a model's layouts in a buffer sized for its pool: a layout naming more blocks than
    the pool has is the caller's error, not a write past that buffer."""
    from kuiper.opencl import get_runtime

    layer = make_layer("kuiper.CachedAttention", backend="opencl",
                       params=dict(num_heads=2, num_kv_heads=1, head_dim=4, max_positions=64),
                       input_shapes=[(1, 2, 40, 4), (1, 1, 40, 4), (1, 1, 40, 4), (40,)])
    layer.use_pool(2)
    layer.use(PageLayout([Span(0, 0, 40, 0, (0, 1, 2))], 1, 40))
    q, k, v = data(1, 2, 40, 4), data(1, 1, 40, 4), data(1, 1, 40, 4)
    with pytest.raises(InputError, match="does not fit a pool of 2 blocks"):
        layer.run_opencl(get_runtime(OPENCL_DEVICES[0]), q, k, v, np.arange(40))


BACKENDS = [("numpy", None), ("reference", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]


@pytest.mark.filterwarnings("ignore:.*no OpenCL forward")
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_a_packed_forward_gives_each_sequence_its_logits_alone(backend, device):
    lm = kuiper.llm.load(TINY, backend=backend, device=device, cache_tokens=256)
    prompts = [lm.tokenizer.encode(text) for text in ("Once upon a time", "The robot read every book",
                                                      "It was the best of times, it was the worst of times.")]
    alone = []
    for ids in prompts:
        rows = [lm.logits(ids)]
        rows += [lm.forward([int(np.argmax(rows[-1][-1]))], len(ids))]
        alone.append(rows)
    sequences = [Sequence(lm.blocks) for _ in prompts]
    lm.sequence.release()
    first = lm.forward_packed(list(zip(sequences, prompts)))
    second = lm.forward_packed([(s, [int(np.argmax(rows[-1]))]) for s, rows in zip(sequences, first)])
    rtol = 1e-4
    for i, rows in enumerate(alone):
        scale = float(np.abs(rows[0]).max())
        np.testing.assert_allclose(first[i], rows[0], rtol=0, atol=rtol * scale, err_msg=f"prefill {i}")
        np.testing.assert_allclose(second[i], rows[1], rtol=0, atol=rtol * scale, err_msg=f"decode {i}")
        assert sequences[i].length == len(prompts[i]) + 1
    held = lm.blocks.held
    assert held == sum(len(s.table) for s in sequences)     # blocks follow the tokens: one each here
    for s in sequences:
        s.release()
    assert lm.blocks.held == 0


def test_one_token_spans_attend_together_as_each_alone():
    """The numpy layer runs a pack's one-token spans (decode steps) as one padded stack of products: six
    sequences of different lengths through scattered tables, with a prompt's chunk beside them, equal the
    reference layer's span-by-span attention over the same pool."""
    from kuiper.cpu.cached_attention import DecodeSteps

    heads, kv_heads, dim, blocks = 6, 2, 16, 40
    made = {}
    for backend in ("reference", "numpy"):
        shapes = [(1, heads, 1, dim), (1, kv_heads, 1, dim), (1, kv_heads, 1, dim), (1,)]
        layer = make_layer("kuiper.CachedAttention", backend=backend, input_shapes=shapes,
                           params=dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=dim, max_positions=128))
        layer.use_pool(blocks)
        made[backend] = layer
    pool = BlockPool(blocks)
    sequences = [Sequence(pool) for _ in range(7)]
    for length in range(1, 61):  # grown together, a block at a time: every table scattered
        for s, last in zip(sequences, (60, 3, 17, 33, 1, 48, 20)):
            if length <= last:
                s.reserve(length)
                s.length = length
    entries = [(s, [0]) for s in sequences[:6]] + [(sequences[6], [0] * 5)]
    _, positions, layout = pack(entries)
    steps = DecodeSteps(layout)
    assert (steps.apart, steps.rows.tolist(), steps.tokens.tolist()) == ([6], [0] * 6, list(range(6)))
    assert steps.blocks.shape == (6, 4)  # padded to the most blocks, 4 for position 60
    assert np.isinf(steps.mask).sum() == sum(64 - (n + 1) for n in (60, 3, 17, 33, 1, 48))
    pools = data(kv_heads, blocks * BLOCK_SIZE, dim), data(kv_heads, blocks * BLOCK_SIZE, dim)
    q, k, v = data(1, heads, 11, dim), data(1, kv_heads, 11, dim), data(1, kv_heads, 11, dim)
    outputs = {}
    for backend, layer in made.items():
        layer.use(layout)
        layer.pool = tuple(p.copy() for p in pools)
        (outputs[backend],) = layer.run_numpy(q, k, v, positions)
    np.testing.assert_allclose(outputs["numpy"], outputs["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:.*no OpenCL forward")
@pytest.mark.parametrize("quantize", [None, "int8"])
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_a_packed_steps_last_rows_are_those_of_the_full_logits(backend, device, quantize):
    """last_rows=True, as the scheduler steps: lm_head computes each sequence's last row alone (numpy backends),
    and those rows equal the full forward's, for prompts packed together and then for decode steps beside a
    prompt."""
    lm = kuiper.llm.load(TINY, backend=backend, device=device, cache_tokens=256, quantize=quantize)
    prompts = [lm.tokenizer.encode(text) for text in ("Once upon a time", "The robot read every book", "Hi")]
    results = {}
    for last_rows in (False, True):
        sequences = [Sequence(lm.blocks) for _ in prompts]
        first = lm.forward_packed(list(zip(sequences[:2], prompts[:2])), last_rows=last_rows)
        steps = [(s, [7 + i]) for i, s in enumerate(sequences[:2])] + [(sequences[2], prompts[2])]
        second = lm.forward_packed(steps, last_rows=last_rows)
        results[last_rows] = first, second
        assert [s.length for s in sequences] == [len(prompts[0]) + 1, len(prompts[1]) + 1, len(prompts[2])]
        for s in sequences:
            s.release()
    assert lm._head.gather_rows is None
    for full, last in zip(*results.values()):
        assert [row.shape for row in last] == [(lm.config.vocab_size,)] * len(full)
        for rows, row in zip(full, last):
            np.testing.assert_allclose(row, rows[-1], rtol=0, atol=1e-6 * np.abs(rows).max())
