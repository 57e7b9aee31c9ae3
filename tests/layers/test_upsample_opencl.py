"""Upsample / interpolate: the kernels of cl/resize.cl against the numpy forward, on every device, in every
mode, over the numpy tests' shapes, scales (1.5, 2, downscales, mixed) and explicit sizes."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from test_upsample import SCALES, SHAPES, upsample

RNG = np.random.default_rng(5)

# (mode, align_corners, rtol): nearest copies an input, so it must match exactly
MODES = [("nearest", None, 0), ("nearest-exact", None, 0), ("bilinear", False, 1e-4), ("bilinear", True, 1e-4),
         ("bicubic", False, 1e-4), ("bicubic", True, 1e-4)]
LARGE = (2, 8, 19, 23)  # several work-groups' worth of outputs


@pytest.mark.parametrize("mode, align_corners, rtol", MODES)
@pytest.mark.parametrize("scale_factor", SCALES)
@pytest.mark.parametrize("shape", SHAPES + [LARGE])
def test_resize_with_scale_factor_opencl(cl_runtime, shape, scale_factor, mode, align_corners, rtol):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = upsample(shape, "F.interpolate", mode=mode, align_corners=align_corners, scale_factor=scale_factor)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=rtol)


@pytest.mark.parametrize("mode, align_corners, rtol", MODES)
@pytest.mark.parametrize("size", [(10, 14), (3, 11), (9, 5), (1, 1), (6, 4)])  # (6, 4): one shape unchanged
@pytest.mark.parametrize("shape", SHAPES)
def test_resize_with_size_opencl(cl_runtime, shape, size, mode, align_corners, rtol):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = upsample(shape, mode=mode, align_corners=align_corners, size=size)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=rtol)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("recompute", [False, True])
def test_recompute_scale_factor_opencl(cl_runtime, recompute, mode):
    # 9 * 1.5 -> 13: the given scale and the recomputed size ratio sample different positions
    shape = (1, 2, 9, 9)
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = upsample(shape, "F.interpolate", mode=mode, scale_factor=(1.5, 1.5), recompute_scale_factor=recompute)
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=0 if mode == "nearest" else 1e-4)


@pytest.mark.parametrize("type_", ["F.upsample_bilinear", "F.upsample_nearest"])
def test_helper_types_opencl(cl_runtime, type_):
    x = RNG.standard_normal((3, 1, 3, 4)).astype(np.float32)
    assert_opencl_matches_numpy(upsample(x.shape, type_, size=(5, 7)), cl_runtime, x)


@pytest.mark.parametrize("mode, align_corners, rtol", MODES)
@pytest.mark.parametrize("cpu", [True, False])
def test_both_kernel_layouts_opencl(cl_runtime, monkeypatch, cpu, mode, align_corners, rtol):
    # a grid launched in spans (CPUs) and a flat range (GPUs), whatever this device is
    monkeypatch.setattr(cl_runtime, "is_cpu", cpu)
    x = RNG.standard_normal(LARGE).astype(np.float32)
    layer = upsample(LARGE, "F.interpolate", mode=mode, align_corners=align_corners, scale_factor=(1.5, 2.5))
    assert_opencl_matches_numpy(layer, cl_runtime, x, rtol=rtol)
