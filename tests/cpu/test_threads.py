"""kuiper's worker threads for the numpy backend (kuiper/cpu/threads.py): splitting, errors, bands."""

import threading

import numpy as np
import pytest

import kuiper
from kuiper.core.errors import KuiperError
from kuiper.cpu import threads


@pytest.fixture
def three(monkeypatch):
    monkeypatch.setattr(threads, "_count", 3)


def record(count, grain=1):
    """The (start, stop, worker, thread) of every part parallel runs over range(count)."""
    parts, lock = [], threading.Lock()

    def part(start, stop, worker):
        with lock:
            parts.append((start, stop, worker, threading.get_ident()))
    threads.parallel(part, count, grain)
    return sorted(parts)


def test_parts_cover_the_range_once_on_distinct_threads(three):
    parts = record(10)
    assert [(start, stop, worker) for start, stop, worker, _ in parts] == [(0, 3, 0), (3, 6, 1), (6, 10, 2)]
    assert parts[0][3] == threading.get_ident()  # the caller runs the first slice itself
    assert len({ident for *_, ident in parts}) == 3


def test_grain_and_count_limit_the_threads(three):
    assert [p[:3] for p in record(10, grain=4)] == [(0, 5, 0), (5, 10, 1)]
    assert [p[:3] for p in record(10, grain=11)] == [(0, 10, 0)]
    assert [p[:3] for p in record(2)] == [(0, 1, 0), (1, 2, 1)]
    assert record(0) == []


def test_one_thread_runs_everything_inline(monkeypatch):
    monkeypatch.setattr(threads, "_count", 1)
    assert [p[:3] for p in record(10)] == [(0, 10, 0)]


def test_a_split_inside_a_part_runs_inline(three):
    inner = []

    def part(start, stop, worker):
        threads.parallel(lambda a, b, w: inner.append((a, b, w)), 4)
    threads.parallel(part, 3)
    assert sorted(inner) == [(0, 4, 0)] * 3


@pytest.mark.parametrize("failing", [0, 2])
def test_an_error_in_any_part_reaches_the_caller_after_all_parts_end(three, failing):
    finished = []

    def part(start, stop, worker):
        if worker == failing:
            raise ValueError(f"part {worker}")
        finished.append(worker)
    with pytest.raises(ValueError, match=f"part {failing}"):
        threads.parallel(part, 3)
    assert sorted(finished) == sorted({0, 1, 2} - {failing})
    assert [p[:3] for p in record(3)] == [(0, 1, 0), (1, 2, 1), (2, 3, 2)]  # still usable


@pytest.mark.parametrize("rows, max_rows, columns, macs, workers, expected", [
    # worth splitting: one image's 14 rows become 2 bands of 7 for 2 threads
    (14, 100, 56, 1 << 30, 2, [(0, 0, 7), (0, 7, 7)]),
    # too thin to split (7 rows of 7 pixels): as few bands as max_rows allows
    (7, 100, 7, 1 << 30, 2, [(0, 0, 7)]),
    # max_rows first asks for 3 bands, which would not split evenly over 2 threads: 4 bands, the taller first
    (10, 4, 56, 1 << 30, 2, [(0, 0, 3), (0, 3, 3), (0, 6, 2), (0, 8, 2)]),
    # 13 rows of at most 4 over 3 threads: 4 bands would leave one thread two of them, so 6
    (13, 4, 56, 1 << 30, 3, [(0, 0, 3), (0, 3, 2), (0, 5, 2), (0, 7, 2), (0, 9, 2), (0, 11, 2)]),
])
def test_bands(monkeypatch, rows, max_rows, columns, macs, workers, expected):
    monkeypatch.setattr(threads, "_count", workers)
    assert threads.bands(1, rows, max_rows, columns, macs) == expected


def test_bands_of_a_batch_split_evenly_over_the_threads(monkeypatch):
    monkeypatch.setattr(threads, "_count", 2)
    units = threads.bands(3, 8, 100, 64, 1 << 30)  # 3 images: 2 bands each, 6 in all
    assert units == [(item, top, 4) for item in range(3) for top in (0, 4)]
    units = threads.bands(4, 8, 100, 64, 1 << 30)  # 4 images: whole images, 2 per thread
    assert units == [(item, 0, 8) for item in range(4)]


@pytest.mark.parametrize("text", ["0", "-2", "two", ""])
def test_bad_thread_counts_are_clear_errors(monkeypatch, text):
    monkeypatch.setattr(threads, "_count", None)
    monkeypatch.setenv("KUIPER_NUM_THREADS", text)
    with pytest.raises(KuiperError, match="KUIPER_NUM_THREADS must be a positive integer"):
        threads.num_threads()
    with pytest.raises(KuiperError, match="positive integer"):
        threads.set_num_threads(0)


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setattr(threads, "_count", None)
    monkeypatch.setenv("KUIPER_NUM_THREADS", "5")
    assert threads.num_threads() == 5


def test_resnet_is_the_same_on_one_thread_and_on_three(monkeypatch):
    x = np.load("models/resnet18/b1_in0.npy")
    graph = kuiper.load("models/resnet18/resnet18.pnnx.param", backend="numpy")
    monkeypatch.setattr(threads, "_count", 1)
    (one,) = graph.forward(x)
    monkeypatch.setattr(threads, "_count", 3)
    (three_threads,) = graph.forward(x)
    np.testing.assert_allclose(three_threads, one, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(one, np.load("models/resnet18/b1_out0.npy"), rtol=1e-4, atol=1e-3)


def test_set_num_threads_and_back_to_the_default(monkeypatch):
    monkeypatch.setenv("KUIPER_NUM_THREADS", "4")
    monkeypatch.setattr(threads, "_count", None)
    kuiper.set_num_threads(1)
    assert kuiper.num_threads() == 1
    kuiper.set_num_threads(None)
    assert kuiper.num_threads() == 4


def test_cli_threads_option(capsys, monkeypatch):
    from kuiper.app import cli

    monkeypatch.setattr(threads, "_count", None)
    assert cli.main(["run", "--threads", "0"]) == 2  # a usage error, refused by argparse
    assert "argument --threads: 0 is not at least 1" in capsys.readouterr().err
    assert cli.main(["run", "--threads", "1"]) == 0
    assert "numpy, 1 thread(s)" in capsys.readouterr().out


def blas_threads():
    return [lib.num_threads for lib in threads._controller().select(user_api="blas").lib_controllers]


def test_forwards_in_several_threads_of_yours_at_once(monkeypatch):
    """Each graph gets right answers while the other runs; BLAS gets its thread count back at the end."""
    monkeypatch.setattr(threads, "_count", 2)
    before = blas_threads()
    x = np.load("models/resnet18/b1_in0.npy")
    want = np.load("models/resnet18/b1_out0.npy")
    graphs = [kuiper.load("models/resnet18/resnet18.pnnx.param", backend="numpy") for _ in range(2)]
    results, errors = {}, []

    def run(k):
        try:
            results[k] = [graphs[k].forward(x)[0] for _ in range(4)]
        except Exception as error:  # reported below, in the test's own thread
            errors.append(error)
    users = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for user in users:
        user.start()
    for user in users:
        user.join()
    assert not errors
    for outs in results.values():
        for out in outs:
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
    assert blas_threads() == before
    assert threads._active == 0


@pytest.mark.parametrize("shape_a, shape_b", [((50, 30), (30, 300)), ((3, 50, 30), (3, 30, 7)), ((2, 40, 9), (9, 33))])
def test_matmul_splits_columns_or_rows(three, monkeypatch, shape_a, shape_b):
    """One layer's GEMM over the threads: wide outputs by columns, narrow ones by rows, stacks as a whole."""
    monkeypatch.setattr(threads, "MIN_MACS", 1)
    monkeypatch.setattr(threads, "MIN_COLUMNS", 64)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    out = np.empty(np.broadcast_shapes(shape_a[:-2], shape_b[:-2]) + (shape_a[-2], shape_b[-1]))
    threads.matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b)
