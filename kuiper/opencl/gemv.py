"""Launching cl/gemv.cl: C = A @ B for products of few rows, the "gemv" variant of kuiper/opencl/gemm.py's Gemm.

A decode step multiplies one row per sequence by every weight matrix: its time is that of reading B once, and a
tile of gemm_gpu would compute mostly rows that are not there. gemv's work-items read B's rows as float4, multiply
every row of A into each value read, and a work-group adds up its slices of K in local memory. Its width follows
the size of B (`Gemv.group`). A product with too few work-groups to fill the device also splits K across them,
as Gemm's split-K does, and gemm_sum adds the slices up.

The constants below were set by timing every variant on the decode shapes of Qwen2.5-0.5B and Llama-3.2-1B on an
H200 (benchmarks/products.py); docs/performance.md keeps the measurements.
"""

from __future__ import annotations

import numpy as np

from kuiper.opencl.runtime import round_up

GEMV = "gemv"
#: gemv's work-groups (LX, LK), widest first: LX work-items of 4 columns each along N (32 columns: 128 bytes of a
#: row of B in fp32; 8 columns: one 32-byte sector), LK along K
GEMV_GROUPS = ((8, 32), (2, 128))
#: the rows of A a work-group multiplies (more rows: one group per block of them, each reading B again)
GEMV_ROWS = 4
#: a B of fewer bytes than this takes the narrow groups: four times as many work-groups, so that a short K needs
#: no split and no second kernel, which costs more than whole lines save on a product done in microseconds;
#: larger ones read whole 128-byte lines (docs/performance.md has both timed)
GEMV_NARROW_BYTES = 4 << 20
#: Gemm's rule takes gemv on GPUs for products of at most this many rows: up to 8 it beat every tile on every
#: decode shape of benchmarks/products.py, though it reads B twice
GEMV_MAX_ROWS = 8
#: split-K slices give each work-item at least this many rows of B
GEMV_SPAN = 4


class Gemv:
    """gemv for one Gemm: its runtime and epilogue; `fits(kernel, work-items)` says whether the device runs a
    kernel in work-groups that large. Kernels are built per work-group on first need."""

    def __init__(self, rt, epilogue, fits):
        self.rt, self.epilogue, self.fits = rt, epilogue, fits
        self.kernels = {}
        self._runs = None

    @property
    def runs(self) -> bool:
        """Whether this device runs every work-group of GEMV_GROUPS, found on first need."""
        if self._runs is None:
            self._runs = all(self.fits(self.kernel(group), group[0] * group[1]) for group in GEMV_GROUPS)
        return self._runs

    def kernel(self, group: tuple, split: bool = False):
        """gemv built for work-groups `group` (LX, LK), writing partial sums with `split`."""
        key = (group, split)
        if key not in self.kernels:
            options = [f"-DLX={group[0]}", f"-DLK={group[1]}", f"-DROWS={GEMV_ROWS}"]
            options += ["-DSPLIT"] if split else self.epilogue.options
            self.kernels[key] = self.rt.kernel("gemv.cl", "gemv", options)
        return self.kernels[key]

    def group(self, n: int, k: int, stack: int) -> tuple:
        """The work-group for B of `stack` matrices k x n: the narrow one below GEMV_NARROW_BYTES."""
        small = stack * k * n * self.rt.stored(np.float32).itemsize < GEMV_NARROW_BYTES
        return GEMV_GROUPS[-1] if small else GEMV_GROUPS[0]

    def __call__(self, q, m: int, n: int, stack: int, args: tuple, slices_for, add_slices):
        """Enqueue C = A @ B for `stack` products of m rows, `args` as Gemm passes gemm_gpu; slices_for(work-groups,
        k, span) is Gemm's split-K count, add_slices(q, args, m, n, stack, slices, partial) its gemm_sum."""
        k = args[10]
        lx, lk = group = self.group(n, k, stack)
        grid = (-(-n // (4 * lx)) * lx, -(-m // GEMV_ROWS) * lk)
        slices = slices_for(grid[0] // lx * (grid[1] // lk) * stack, k, GEMV_SPAN * lk)
        if slices == 1:
            return q.run(self.kernel(group), (*grid, stack), (lx, lk, 1), *args)
        span = round_up(-(-k // slices), lk)
        slices = -(-k // span)
        partial = q.scratch("split-K sums", 4 * slices * stack * m * n)
        q.run(self.kernel(group, True), (*grid, stack * slices), (lx, lk, 1), *args, slices, span, partial)
        return add_slices(q, args, m, n, stack, slices, partial)
