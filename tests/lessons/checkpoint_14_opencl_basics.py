"""Checkpoint of lesson 14: the kernel of exercises/lesson_14.py, built with pyopencl on the device kuiper picks
and launched over a rounded-up global size, held to numpy's formula and to its own bounds."""

import numpy as np
import pyopencl as cl
import pytest

from kuiper.opencl import get_runtime, round_up
from lesson_tools import exercise

# a driver's build log (warnings, or its notes on vectorizing) is not a failure
pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")
ex = exercise(14)
SENTINEL = 7.0


def run_leaky(x, slope, local):
    rt = get_runtime()
    kernel = cl.Program(rt.context, ex.leaky_source()).build().leaky
    n = x.size
    mf = cl.mem_flags
    x_buf = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    y = np.full(n + 64, SENTINEL, np.float32)            # room past the end, to see a write past n
    y_buf = cl.Buffer(rt.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    kernel(rt.queue, (round_up(n, local),), (local,), y_buf, x_buf, np.int32(n), np.float32(slope))
    cl.enqueue_copy(rt.queue, y, y_buf)
    return y[:n], y[n:]


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("slope", [0.1, 0.0, -2.0])
def test_leaky_matches_numpy(n, slope):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    got, _ = run_leaky(x, slope, 64)
    np.testing.assert_allclose(got, np.where(x > 0, x, np.float32(slope) * x), rtol=1e-6, atol=0)


def test_leaky_checks_its_bounds():
    x = np.linspace(-1, 1, 37, dtype=np.float32)
    _, past_the_end = run_leaky(x, 0.5, 64)              # 27 work-items beyond n
    assert (past_the_end == SENTINEL).all()
