"""Softmax on OpenCL (cl/softmax.cl) against its numpy forward, on every device, over every dim of odd shapes.

Contiguous rows go to a work-item on CPUs, which walks the row eight elements a step (lengths below 8, multiples
of 8 and others check its tail), and to a work-group of many on GPUs. The `cl_paths` fixture also makes
the runtime (and its fp16 view) report a GPU, so that every device checks both ways (PoCL runs work-groups
correctly, if not fast).
"""

import numpy as np
import pytest

from conftest import FP16_RTOL, assert_opencl_matches_numpy, assert_outputs_close, fp16_twin
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(9)


def softmax(dim, shape):
    return make_layer("nn.Softmax", backend="opencl", params={"dim": dim}, input_shapes=[shape])


def logits(*shape):
    return (RNG.standard_normal(shape) * 20).astype(np.float32)  # wide: the max must be subtracted


@pytest.fixture(params=[False, True], ids=["as-is", "as-gpu"])
def cl_paths(request, cl_runtime, monkeypatch):
    """The device as it is, then posing as a GPU: the layers then build and choose their GPU kernels."""
    pose_as(monkeypatch, cl_runtime, cl_runtime.is_cpu and not request.param)
    return cl_runtime


def pose_as(monkeypatch, rt, is_cpu: bool) -> None:
    """For one test, rt and its fp16 view report is_cpu. The view (conftest's fp16_twin) is a copy made once:
    it keeps the is_cpu its runtime had then, unless it is told too."""
    for view in (rt, fp16_twin(rt)):  # the view made (if not yet) before rt is patched
        if view is not None:
            monkeypatch.setattr(view, "is_cpu", is_cpu)


def assert_fp16_close(layer, rt, x, expected):
    """On the first device, the layer with half storage within FP16_RTOL of `expected`: conftest's fp16 check,
    for the tests that call run_opencl themselves."""
    half = fp16_twin(rt)
    if half is not None:
        assert_outputs_close(layer.run_opencl(half, x), [expected], FP16_RTOL, "fp16")


@pytest.mark.parametrize("shape", [(1,), (13,), (3, 5, 7), (1, 13, 7), (2, 7, 5, 9)])
def test_every_dim_matches_numpy(cl_paths, shape):
    x = logits(*shape)
    for dim in range(-len(shape), len(shape)):
        assert_opencl_matches_numpy(softmax(dim, shape), cl_paths, x)


@pytest.mark.parametrize("shape, dim", [
    ((3, 1000), -1), ((2, 7, 300), 2), ((5, 33), 1), ((1, 32), -1),    # rows for a work-group on GPUs
    ((3, 4097), -1),                                                     # longer than any work-group
    ((300, 3), 0),                                                       # long, but strided: one per line
])
def test_long_lines_match_numpy(cl_paths, shape, dim):
    assert_opencl_matches_numpy(softmax(dim, shape), cl_paths, logits(*shape))


def test_infinities_and_nan_follow_numpy(cl_paths):
    x = logits(4, 200)
    x[0, :] = -np.inf       # exp(-inf - -inf): NaN, as in numpy and PyTorch
    x[1, 5] = np.inf
    x[2, 7] = np.nan
    x[3, ::2] = -np.inf     # those get exactly 0
    layer = softmax(-1, x.shape)
    with np.errstate(invalid="ignore"):
        (expected,) = layer.run_numpy(x)
    (got,) = layer.run_opencl(cl_paths, x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    assert_fp16_close(layer, cl_paths, x, expected)
