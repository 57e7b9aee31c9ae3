"""Checkpoint of lesson 19: the work-group-per-plane BatchNorm kernel of exercises/lesson_19.py, built with
pyopencl on the device kuiper picks and launched with several group sizes, held to kuiper's BatchNorm2d."""

import numpy as np
import pyopencl as cl
import pytest

from kuiper.opencl import get_runtime
from kuiper.runtime.backends import make_layer
from lesson_tools import exercise

# a driver's build log (warnings, or its notes on vectorizing) is not a failure
pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")
ex = exercise(19)


@pytest.mark.parametrize("shape", [(2, 5, 33, 31), (1, 512, 7, 7), (3, 7, 1, 1), (1, 3, 64, 64)], ids=str)
@pytest.mark.parametrize("local", [1, 16, 64])
def test_batchnorm_group_matches_the_layer(shape, local):
    rt = get_runtime()
    rng = np.random.default_rng(shape[1])
    n, c, h, w = shape
    stats = dict(running_mean=rng.standard_normal(c), running_var=rng.uniform(0.5, 2.0, c),
                 weight=rng.standard_normal(c), bias=rng.standard_normal(c))
    bn = make_layer("nn.BatchNorm2d", params=dict(num_features=c, eps=1e-5, affine=True),
                    attrs={k: v.astype(np.float32) for k, v in stats.items()}, input_shapes=[shape])
    x = rng.standard_normal(shape).astype(np.float32)
    kernel = cl.Program(rt.context, ex.batchnorm_group_source()).build().batchnorm_group
    mf = cl.mem_flags
    upload = lambda a: cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
    y = np.full(x.size + 64, 7.0, np.float32)
    y_buf = cl.Buffer(rt.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    kernel(rt.queue, (local * n * c,), (local,), y_buf, upload(x), upload(bn.scale.ravel()),
           upload(bn.shift.ravel()), np.int32(h * w), np.int32(c))
    cl.enqueue_copy(rt.queue, y, y_buf)
    np.testing.assert_allclose(y[:x.size].reshape(shape), bn.run_numpy(x)[0], rtol=1e-5, atol=1e-5)
    assert (y[x.size:] == 7.0).all()
