"""Worker threads for the numpy backend: one layer's work split into parts that run at the same time.

numpy lets go of Python's GIL inside its C loops and BLAS calls, so plain Python threads keep several cores
busy as long as each part is a few large array operations. Left alone, only BLAS would use the other cores,
and only inside matrix products: copies, Winograd's transforms, pooling and activations would run on one.
BLAS also splits every product of a stack by itself, too finely for a stack of small products (Winograd's).

So layers split their work themselves (`parallel`): convolutions by bands of output rows or by channels,
single GEMMs (Linear, 1x1 and transposed convolutions: `matmul`) by rows or columns, element-wise layers
and large sums by blocks of elements, pooling by channel planes. While a numpy forward
runs (`active`), BLAS is held at one thread: OpenBLAS's idle threads keep spinning for a while after each
call and slow the parts that follow. Handing a part to a thread and back still costs time (the GIL changes
hands twice), so a part must be worth it: `grain` sets the least work per part, and below it the caller does
everything.

The number of threads is `KUIPER_NUM_THREADS` if set, else as many as BLAS would use (OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS, or the cores this process may run on), or `set_num_threads(n)`.

docs/tuning.md keeps the measurements behind these choices and MIN_COLUMNS, MIN_MACS.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time

import numpy as np
from threadpoolctl import ThreadpoolController

from kuiper.core.errors import KuiperError

_state = threading.local()  # .inside is True while a thread runs a part: a part that splits again runs inline
_count: int | None = None
_workers: list = []  # started on first use, kept for the life of the process
_busy = threading.Lock()  # held by the caller of parallel whose parts the workers run
_span = threading.Lock()  # guards the two below
_active = 0  # forwards inside `active()`: while any runs, idle workers spin instead of sleeping
_blas_limit = None  # threadpoolctl's limit while _active, to restore after
_blas: ThreadpoolController | None = None


def _forget_workers() -> None:
    global _workers
    _workers = []  # a forked child has none of its parent's threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _controller() -> ThreadpoolController:
    global _blas
    if _blas is None:  # scanning the loaded libraries takes milliseconds: once per process
        _blas = ThreadpoolController()
    return _blas


def _default_count() -> int:
    text = os.environ.get("KUIPER_NUM_THREADS")
    if text is not None:
        if not text.strip().isdigit() or int(text) < 1:
            raise KuiperError(f"KUIPER_NUM_THREADS must be a positive integer, got {text!r}")
        return int(text)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    blas = [lib.num_threads for lib in _controller().select(user_api="blas").lib_controllers]
    return max(1, min([cores, *blas]))


def num_threads() -> int:
    """How many threads a numpy forward uses (the caller's included)."""
    global _count
    if _count is None:
        _count = _default_count()
    return _count


def set_num_threads(count: int | None) -> None:
    """Use `count` threads from now on (1: everything on the calling thread, BLAS left as configured);
    None goes back to the default (KUIPER_NUM_THREADS, else as many as BLAS uses)."""
    global _count
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise KuiperError(f"set_num_threads needs a positive integer or None, got {count!r}")
    _count = count


class _Worker(threading.Thread):
    """One of kuiper's threads: runs the parts `parallel` gives it, one at a time.

    While a forward runs (`active`), it keeps looking for its next part between parts, yielding its core
    between looks, rather than sleeping: waking a sleeping thread takes about as long as a small layer's
    whole part. Outside a forward, or after SPIN_SECONDS without work, it sleeps."""

    def __init__(self, index: int):
        super().__init__(name=f"kuiper-{index}", daemon=True)
        self.job = None  # (part, start, stop, worker index) while there is work
        self.error = None
        self.done = threading.Event()
        self.wake = threading.Event()
        self.start()

    def give(self, job) -> None:
        self.done.clear()
        self.job = job
        self.wake.set()

    def run(self) -> None:
        _state.inside = True
        idle_since = time.perf_counter()
        while True:
            job = self.job
            if job is None:
                if _active and time.perf_counter() - idle_since < SPIN_SECONDS:
                    _yield()
                else:
                    self.wake.wait()
                    self.wake.clear()
                continue
            part, start, stop, index = job
            try:
                part(start, stop, index)
                self.error = None
            except BaseException as error:  # handed to the caller of parallel
                self.error = error
            self.job = None
            self.done.set()
            idle_since = time.perf_counter()

    def wait(self):
        """Wait for the part to finish (spinning first, like the worker); return its error or None."""
        deadline = time.perf_counter() + SPIN_SECONDS
        while not self.done.is_set() and time.perf_counter() < deadline:
            _yield()
        self.done.wait()
        return self.error


#: how long an idle thread keeps looking for work during a forward before it sleeps (see _Worker)
SPIN_SECONDS = 0.05
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))  # lets the GIL and the core go for a moment


def parts(count: int, grain: int = 1) -> int:
    """How many threads `parallel` splits range(count) over for this grain (below 2: the caller alone)."""
    return min(num_threads(), count // max(1, grain))


def parallel(part, count: int, grain: int = 1) -> None:
    """Run `part(start, stop, worker)` over contiguous, near-equal slices of range(count), one per thread,
    each slice at least `grain` long (fewer threads if need be; with one, the caller runs it all).

    The calling thread runs the first slice itself (worker 0); `worker` lets a part pick its own scratch
    buffers. Returns once every slice is done, re-raising the first error. Inside a part, parallel runs
    the whole range inline, so nested splits cannot wait on threads they occupy; so does a second caller
    while another one has the threads (two forwards at once in two threads of yours).
    """
    threads = parts(count, grain)
    if threads <= 1 or getattr(_state, "inside", False) or not _busy.acquire(blocking=False):
        if count > 0:
            part(0, count, 0)
        return
    try:
        global _workers
        if len(_workers) < num_threads() - 1:
            _workers += [_Worker(i) for i in range(len(_workers) + 1, num_threads())]
        bounds = [count * i // threads for i in range(threads + 1)]
        helpers = _workers[:threads - 1]
        for i, worker in enumerate(helpers, 1):
            worker.give((part, bounds[i], bounds[i + 1], i))
        _state.inside = True
        try:
            part(bounds[0], bounds[1], 0)
        finally:  # wait even if our slice failed: the others are still writing into shared buffers
            _state.inside = False
            errors = [worker.wait() for worker in helpers]
    finally:
        _busy.release()
    for error in errors:
        if error is not None:
            raise error


@contextlib.contextmanager
def active():
    """The span of a numpy forward: BLAS held at one thread, and kuiper's idle threads awake between parts
    (only when kuiper has threads of its own to split work over). Forwards running at once in several
    threads of yours share one span: the first to start holds BLAS, the last to end lets it go."""
    global _active, _blas_limit
    if num_threads() <= 1:
        yield
        return
    with _span:
        _active += 1
        if _active == 1:
            _blas_limit = _controller().limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        with _span:
            _active -= 1
            if _active == 0:
                _blas_limit.restore_original_limits()


#: a band of a convolution split over threads keeps at least this many output pixels (columns of its GEMM):
#: thinner GEMMs lose more to BLAS's packing than another thread gains
MIN_COLUMNS = 64
#: ... and at least this many multiply-adds, to pay for handing it to a thread
MIN_MACS = 1 << 23


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """np.matmul(a, b, out=out), shared over kuiper's threads (BLAS keeps to one during a forward): by the
    columns of `out` when every thread gets MIN_COLUMNS of them, else by its rows, each part worth MIN_MACS.
    A stack of products splits the same way, all of them at once. For layers whose work is one GEMM."""
    rows, depth, columns = a.shape[-2], a.shape[-1], out.shape[-1]
    stack = out.size // max(1, rows * columns)
    if columns >= MIN_COLUMNS * num_threads():
        parallel(lambda first, stop, _: np.matmul(a, b[..., first:stop], out=out[..., first:stop]), columns,
                 grain=-(-MIN_MACS // max(1, stack * rows * depth)))
    else:
        parallel(lambda first, stop, _: np.matmul(a[..., first:stop, :], b, out=out[..., first:stop, :]), rows,
                 grain=-(-MIN_MACS // max(1, stack * depth * columns)))


def bands(items: int, rows: int, max_rows: int, row_columns: int, row_macs: int,
          min_columns: int | None = None) -> list:
    """(item, first row, row count) bands covering `rows` output rows of each of `items` images, each band at
    most `max_rows` rows, none more than one row taller than another, the tallest first.

    Rows are cut into enough bands for an even split over the threads, where the rows allow; but an image that
    fits in one band is cut only if every band would still be worth a thread (`min_columns`, MIN_COLUMNS by
    default, and MIN_MACS, with `row_columns` GEMM columns and `row_macs` multiply-adds per row). Otherwise the
    caller splits its work another way."""
    count = -(-rows // max_rows)  # bands per image
    workers = num_threads()
    share = workers // math.gcd(items, workers)  # bands per image must be a multiple of this for an even split
    split = min(rows, -(-count // share) * share)
    # images already cut into bands share them evenly; whole images are cut only if the bands are worth it
    least = MIN_COLUMNS if min_columns is None else min_columns
    if count > 1 or rows // split * row_columns >= least and rows // split * row_macs >= MIN_MACS:
        count = split
    heights = [rows // count + (k < rows % count) for k in range(count)]
    tops = [sum(heights[:k]) for k in range(count)]
    return [(item, top, height) for item in range(items) for top, height in zip(tops, heights)]
