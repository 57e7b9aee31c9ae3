"""cl/gemm.cl through kuiper/opencl/gemm.py: both kernels on every device against numpy in float64, on sizes
around the kernels' blocks and tiles (1, 3, 17, 63, 64, 65, 129), with bias, padded leading dimensions,
offsets and stacks of groups x batch items; and every block and tile size (each a variant) on one product."""

from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, ROW_BIAS, Gemm, Matrix
from kuiper.opencl import Enqueuer

SIZES = (1, 3, 17, 63, 64, 65, 129)
VARIANTS = ("cpu", "gpu")
RNG = np.random.default_rng(5)


def enqueuer(rt):
    q = Enqueuer(rt)
    q.begin(SimpleNamespace(name="gemm"), ())
    return q


def gemm_on_device(rt, family, a, b, bias=None, bias_mode=NO_BIAS, pad=0, name=None):
    """C = A @ B (+ bias) for one product, with every leading dimension `pad` wider than its matrix, by the
    variant called `name` (else the rule's) of that kernel family ("cpu", "gpu", or None for both)."""
    (m, k), n = a.shape, b.shape[1]
    a_pad, b_pad = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, 0), (0, pad)))
    c = rt.allocate(4 * m * (n + pad))
    q = enqueuer(rt)
    gemm = Gemm(rt, family)
    gemm(q, m, n, k, Matrix(c, n + pad), Matrix(rt.upload(a_pad), k + pad), Matrix(rt.upload(b_pad), n + pad),
         bias=None if bias is None else rt.upload(bias), bias_mode=bias_mode,
         variant=None if name is None else gemm.variants[name])
    q.finish()
    out = np.empty((m, n + pad), np.float32)
    cl.enqueue_copy(rt.queue, out, c)
    return out[:, :n]


def assert_close(got, expected):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m", SIZES)
def test_awkward_sizes(cl_runtime, variant, m):
    for i, n in enumerate(SIZES):
        k = SIZES[(i + SIZES.index(m)) % len(SIZES)]  # every k meets every m and every n once
        a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
        assert_close(gemm_on_device(cl_runtime, variant, a, b), a.astype(np.float64) @ b)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m, n, k", [(65, 33, 17), (6, 1, 129), (1, 47, 3), (200, 300, 70)])
def test_bias_per_row_and_column_with_padded_rows(cl_runtime, variant, m, n, k):
    a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
    exact = a.astype(np.float64) @ b
    rows, columns = RNG.standard_normal(m, dtype=np.float32), RNG.standard_normal(n, dtype=np.float32)
    assert_close(gemm_on_device(cl_runtime, variant, a, b, rows, ROW_BIAS, pad=5), exact + rows[:, None])
    assert_close(gemm_on_device(cl_runtime, variant, a, b, columns, COLUMN_BIAS, pad=3), exact + columns)


@pytest.mark.parametrize("variant", VARIANTS)
def test_stack_of_groups_and_items(cl_runtime, variant):
    """The convolution layout: C[item, g] = A[g] @ B[item, g] + bias[g], with A shared by the items and
    everything read and written past a leading offset."""
    items, groups, m, n, k, offset = 3, 2, 19, 37, 23, 7
    a = RNG.standard_normal((groups, m, k), dtype=np.float32)
    b = RNG.standard_normal((items, groups, k, n), dtype=np.float32)
    bias = RNG.standard_normal((groups, m), dtype=np.float32)
    rt = cl_runtime
    c = rt.allocate(4 * (offset + items * groups * m * n))
    q = enqueuer(rt)
    Gemm(rt, variant)(
        q, m, n, k,
        c=Matrix(c, n, group=m * n, item=groups * m * n, offset=offset),
        a=Matrix(rt.upload(np.concatenate([np.zeros(offset, np.float32), a.ravel()])), k, group=m * k,
                 offset=offset),
        b=Matrix(rt.upload(np.concatenate([np.zeros(offset, np.float32), b.ravel()])), n, group=k * n,
                 item=groups * k * n, offset=offset),
        groups=groups, items=items, bias=rt.upload(bias), bias_mode=ROW_BIAS)
    q.finish()
    out = np.empty(offset + items * groups * m * n, np.float32)
    cl.enqueue_copy(rt.queue, out, c)
    expected = np.matmul(a.astype(np.float64), b) + bias[:, :, None]
    assert_close(out[offset:].reshape(expected.shape), expected)


def test_every_block_and_tile_size_that_fits(cl_runtime):
    m, n, k = 37, 35, 19
    a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
    bias = RNG.standard_normal(m, dtype=np.float32)
    gemm = Gemm(cl_runtime)
    names = gemm.candidates(n)
    assert [name for name in names if name.startswith("cpu")] == ["cpu 6x32", "cpu 6x16", "cpu 6x4", "cpu 6x1"]
    assert gemm.candidates(5) == ["cpu 6x4", "cpu 6x1"] + names[4:]  # gemm_cpu needs N >= its block
    for name in names:
        got = gemm_on_device(cl_runtime, None, a, b, bias, ROW_BIAS, pad=2, name=name)
        assert_close(got, a.astype(np.float64) @ b + bias[:, None])


def test_the_rule_follows_the_device_and_the_product(cl_runtime):
    gemm = Gemm(cl_runtime)
    if cl_runtime.is_cpu:
        assert [gemm.rule(64, n, 1) for n in (1, 3, 17, 32, 1000)] == ["cpu 6x1", "cpu 6x1", "cpu 6x16", "cpu 6x32",
                                                                        "cpu 6x32"]
    assert Gemm(cl_runtime, "gpu").rule(1, 1, 1) == f"gpu {gemm.tiles[-1][0]}x{gemm.tiles[-1][1]}"  # the smallest
