"""Checkpoint of lesson 16: the four-column GEMM kernel of exercises/lesson_16.py, built with pyopencl on the
device kuiper picks, held to float64 matmul on shapes that no block of four divides."""

import numpy as np
import pyopencl as cl
import pytest

from kuiper.opencl import get_runtime
from lesson_tools import exercise

# a driver's build log (warnings, or its notes on vectorizing) is not a failure
pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")
ex = exercise(16)


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (4, 8, 3), (37, 53, 29), (16, 130, 64), (5, 3, 7)])
def test_gemm4_matches_matmul(m, n, k):
    rt = get_runtime()
    kernel = cl.Program(rt.context, ex.gemm4_source()).build().gemm4
    rng = np.random.default_rng(m * n * k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    mf = cl.mem_flags
    a_buf = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    c = np.full((m, n + 8), 7.0, np.float32)            # 8 spare columns: a write past N lands in the next row
    c_buf = cl.Buffer(rt.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
    kernel(rt.queue, (-(-n // 4), m), None, c_buf, a_buf, b_buf, np.int32(m), np.int32(n), np.int32(k))
    cl.enqueue_copy(rt.queue, c, c_buf)
    got = c.reshape(-1)[:m * n].reshape(m, n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert (c.reshape(-1)[m * n:] == 7.0).all()          # nothing written past C
