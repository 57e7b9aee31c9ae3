"""gemm_mma (cl/gemm_mma.cl): GEMMs on NVIDIA tensor cores through inline PTX, with half storage and at TF32, on a
device that has them (kuiper.opencl.devices.tensor_cores); skipped on every other. Convolutions (implicit im2col,
groups, strides, dilation, a fused epilogue), Winograd's F(2x2) and linear layers, with sizes off the 64 x 64
tile and K off its step of 32, against the numpy forward at half's tolerance (TF32 keeps half's 10 bits of
mantissa); and the rule's choice of it."""

import numpy as np
import pytest

from conftest import FP16_RTOL, assert_opencl_matches_numpy, on_opencl
from test_conv2d import CASES, make_conv
from test_linear import make_linear

from kuiper.opencl.gemm import MMA_PRECISIONS, MMA_TILES, mma_name
from kuiper.opencl.winograd import STORED

RNG = np.random.default_rng(23)

CONVS = {**CASES,
         "resnet 3x3": dict(in_channels=64, out_channels=64, kernel_size=3, padding=1, input_shape=(2, 64, 14, 14)),
         "odd 3x3 stride2": dict(in_channels=19, out_channels=70, kernel_size=3, stride=2, padding=1,
                                 input_shape=(3, 19, 17, 15)),
         "stem 7x7": dict(in_channels=3, out_channels=64, kernel_size=7, stride=2, padding=3,
                          input_shape=(1, 3, 40, 36)),
         "1x1 wide": dict(in_channels=96, out_channels=130, kernel_size=1, input_shape=(2, 96, 9, 9))}


@pytest.fixture(params=MMA_PRECISIONS)
def half(cl_runtime, request):
    rt = cl_runtime.at_precision(request.param)
    layer, _, _ = make_linear(RNG, 8, 8, True, input_shape=(2, 8), backend="opencl")
    layer.build_opencl(rt)
    if not layer.gemm.mma:
        pytest.skip(f"{cl_runtime.device.name.strip()}: no tensor cores (kuiper.opencl.devices.tensor_cores)")
    return rt


@pytest.mark.parametrize("tile", MMA_TILES, ids=mma_name)
@pytest.mark.parametrize("name", CONVS)
def test_convolutions_on_tensor_cores(half, name, tile):
    layer = on_opencl(make_conv(RNG, **CONVS[name])[0])
    x = RNG.standard_normal(CONVS[name]["input_shape"]).astype(np.float32)
    layer.build_opencl(half)
    if layer.variants is None or mma_name(tile) not in layer.variants.candidates((x.shape,)):
        pytest.skip("this convolution runs a kernel of its own (depthwise), not a GEMM")
    assert_opencl_matches_numpy(layer, half, x, rtol=FP16_RTOL, variant=mma_name(tile))


@pytest.mark.parametrize("shape", [(2, 64, 14, 14), (3, 19, 17, 15), (1, 256, 7, 7)])
def test_winograd_f2_on_tensor_cores(half, shape):
    layer = on_opencl(make_conv(RNG, in_channels=shape[1], out_channels=70, kernel_size=3, padding=1,
                                input_shape=shape)[0])
    layer.build_opencl(half)
    assert layer.winograd.stored_gemm.rule(70, 64 * half.device.max_compute_units, 16).startswith("mma")
    assert_opencl_matches_numpy(layer, half, RNG.standard_normal(shape).astype(np.float32), rtol=FP16_RTOL,
                                variant=STORED)


@pytest.mark.parametrize("tile", MMA_TILES, ids=mma_name)
@pytest.mark.parametrize("in_features, out_features, shape", [
    (512, 1000, (32, 512)), (33, 70, (2, 13, 33)), (7, 5, (3, 7)), (200, 129, (130, 200))])
def test_linear_on_tensor_cores(half, in_features, out_features, shape, tile):
    layer, _, _ = make_linear(RNG, in_features, out_features, True, input_shape=shape)
    assert_opencl_matches_numpy(layer, half, RNG.standard_normal(shape).astype(np.float32), rtol=FP16_RTOL,
                                variant=mma_name(tile))


def test_the_rule_takes_tensor_cores_where_tiles_fill_the_device(half):
    units = half.device.max_compute_units
    layer, _, _ = make_linear(RNG, 64, 64, True, input_shape=(64, 64), backend="opencl")
    layer.build_opencl(half)
    assert layer.gemm.rule(64, 64 * units, 1) == "mma 64x64"    # 64 rows: the 128-row tile would be half empty
    assert layer.gemm.rule(512, 128 * units, 1) == "mma 128x128"
    assert not layer.gemm.rule(512, 20, 64).startswith("mma")  # 20 columns: most of any tile empty
    assert not layer.gemm.rule(64, 64, 1).startswith("mma")    # one tile: gemm_gpu, split along K
