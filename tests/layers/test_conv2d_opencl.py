"""nn.Conv2d on OpenCL (im2col + GEMM on CPUs, implicit im2col in the GEMM on GPUs, 1x1 as a plain GEMM,
depthwise direct: cl/conv.cl, cl/gemm.cl) against its numpy forward, on the numpy tests' cases, with batches
split into chunks, with the other device type's kernels and with every GEMM variant."""

import numpy as np
import pytest

import kuiper.opencl.gemm
from conftest import assert_every_variant_matches_numpy, assert_opencl_matches_numpy
from test_conv2d import CASES, make_conv

RNG = np.random.default_rng(19)


def check(case, rt, shape=None):
    layer, _, _ = make_conv(RNG, **case)
    x = RNG.standard_normal(shape or case["input_shape"]).astype(np.float32)
    assert_opencl_matches_numpy(layer, rt, x)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_conv_opencl_matches_numpy(cl_runtime, case):
    check(case, cl_runtime)


@pytest.mark.parametrize("case", [
    # ResNet-like: channels past the GEMM blocks, 3x3 pad 1 at stride 1 and 2, a 1x1 stride-2 downsample
    dict(in_channels=16, out_channels=40, kernel_size=3, padding=1, input_shape=(2, 16, 15, 13)),
    dict(in_channels=16, out_channels=24, kernel_size=3, stride=2, padding=1, input_shape=(1, 16, 15, 13)),
    dict(in_channels=16, out_channels=24, kernel_size=1, stride=2, bias=False, input_shape=(1, 16, 15, 13)),
    dict(in_channels=24, out_channels=24, kernel_size=3, padding=1, groups=24, input_shape=(2, 24, 9, 33)),
], ids=["3x3", "3x3 stride2", "1x1 stride2", "depthwise wide"])
def test_larger_convolutions_opencl(cl_runtime, case):
    check(case, cl_runtime)


def test_unbatched_and_chunked_batch_opencl(cl_runtime, monkeypatch):
    case = CASES["stride2 odd batch3 nobias"]
    check(case, cl_runtime, shape=case["input_shape"][1:])
    monkeypatch.setattr(kuiper.opencl.gemm, "COLUMN_BYTES", 3000)  # one item per chunk
    check(case, cl_runtime)
    check(CASES["groups3 stride2"], cl_runtime)


@pytest.mark.parametrize("name", ["groups3 stride2", "pointwise grouped", "7x7 stride2 pad3"])
def test_other_gemm_variant_opencl(cl_runtime, monkeypatch, name):
    monkeypatch.setattr(cl_runtime, "is_cpu", not cl_runtime.is_cpu)
    check(CASES[name], cl_runtime)


@pytest.mark.parametrize("name", ["stride2 odd batch3 nobias", "pointwise grouped"])
def test_every_gemm_variant_opencl(cl_runtime, name):
    """im2col + each gemm_cpu block, implicit im2col + each gemm_gpu tile (for a 1x1 kernel: the input itself)."""
    layer, _, _ = make_conv(RNG, **CASES[name])
    x = RNG.standard_normal(CASES[name]["input_shape"], dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    assert {n.split()[0] for n in names} == {"cpu", "gpu"}
