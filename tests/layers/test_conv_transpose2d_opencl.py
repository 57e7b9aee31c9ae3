"""nn.ConvTranspose2d on OpenCL (GEMM, then col2im in cl/conv.cl) against its numpy forward, on the numpy
tests' cases, with batches split into chunks, with the other device type's GEMM kernel and on the
out-of-order queue of the levels schedule."""

import numpy as np
import pytest

import kuiper.opencl.gemm
from conftest import assert_every_variant_matches_numpy, assert_opencl_matches_numpy
from kuiper.opencl import DeviceTensor, Enqueuer
from test_conv_transpose2d import CASES, make_deconv
from test_softmax_opencl import pose_as

RNG = np.random.default_rng(17)


def check(case, rt, shape=None):
    layer, _, _ = make_deconv(RNG, **case)
    x = RNG.standard_normal(shape or case["input_shape"]).astype(np.float32)
    assert_opencl_matches_numpy(layer, rt, x)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_conv_transpose_opencl_matches_numpy(cl_runtime, case):
    check(case, cl_runtime)


def test_unbatched_and_chunked_batch_opencl(cl_runtime, monkeypatch):
    case = CASES["stride2 pad1 outpad1 groups2"]
    check(case, cl_runtime, shape=case["input_shape"][1:])
    monkeypatch.setattr(kuiper.opencl.gemm, "COLUMN_BYTES", 3000)  # one item per chunk
    check(case, cl_runtime)


@pytest.mark.parametrize("name", ["dilation3 groups2", "asymmetric nobias"])
def test_other_gemm_variant_opencl(cl_runtime, monkeypatch, name):
    pose_as(monkeypatch, cl_runtime, not cl_runtime.is_cpu)
    check(CASES[name], cl_runtime)


def test_kernels_keep_their_order_on_the_out_of_order_queue(cl_runtime, monkeypatch):
    """On the levels schedule a layer's kernels share an out-of-order queue and wait only for the layer's
    producers: each chunk's col2im must still follow its GEMM, and the next GEMM that col2im (Enqueuer chains them)."""
    monkeypatch.setattr(kuiper.opencl.gemm, "COLUMN_BYTES", 3000)  # one item per chunk
    layer, _, _ = make_deconv(RNG, **CASES["stride2 pad1 outpad1 groups2"], backend="opencl")
    x = RNG.standard_normal(CASES["stride2 pad1 outpad1 groups2"]["input_shape"]).astype(np.float32)
    expected = layer.run_numpy(x)[0]
    layer.build_opencl(cl_runtime)
    y = DeviceTensor(cl_runtime, cl_runtime.allocate(expected.nbytes), expected.shape)
    for _ in range(5):  # a missing wait shows up as a race, not every time
        q = Enqueuer(cl_runtime, levels=True)
        q.begin(layer.op, ())
        layer.forward_opencl(q, [DeviceTensor(cl_runtime, cl_runtime.upload(x), x.shape)], [y])
        q.finish()
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_every_gemm_variant_opencl(cl_runtime):
    case = CASES["stride2 pad1 outpad1 groups2"]
    layer, _, _ = make_deconv(RNG, **case)
    x = RNG.standard_normal(case["input_shape"], dtype=np.float32)
    assert len(assert_every_variant_matches_numpy(layer, cl_runtime, x)) > 1
