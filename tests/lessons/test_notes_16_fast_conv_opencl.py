"""The claims of lesson 16: both GEMM kernels against float64 matmul, every convolution path against an einsum
reference, and FLOP counts from the shapes. Profiling events are checked for completeness, never for time."""

from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, ROW_BIAS, Gemm, Matrix
from kuiper.opencl import DeviceTensor, Enqueuer, conv2d
from kuiper.runtime.backends import make_layer
from lesson_tools import check_shell_commands

RNG = np.random.default_rng(15)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def enqueuer(rt, name):
    q = Enqueuer(rt)
    q.begin(SimpleNamespace(name=name), ())
    return q


def assert_close(got, exact):
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(exact).max())))


def stacked_gemm(rt, variant, a, b, bias_mode=NO_BIAS, pad=0, offset=0):
    """C[item, g] = A[g] @ B[item, g] (+ bias) on the device, every matrix `pad` elements wider than it is and
    every buffer starting `offset` elements late. a: (groups, m, k), b: (items, groups, k, n)."""
    (groups, m, k), (items, _, _, n) = a.shape, b.shape
    lda, ldb, ldc = k + pad, n + pad, n + pad

    def place(array, ld):  # pad each row to ld, then put `offset` zeros in front
        rows = np.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, ld - array.shape[-1])])
        return np.concatenate([np.zeros(offset, np.float32), rows.ravel()])

    bias = normal(groups, m if bias_mode == ROW_BIAS else n)
    c = rt.allocate(4 * (offset + items * groups * m * ldc))
    q = enqueuer(rt, "gemm")
    event = Gemm(rt, variant)(
        q, m, n, k,
        c=Matrix(c, ldc, group=m * ldc, item=groups * m * ldc, offset=offset),
        a=Matrix(rt.upload(place(a, lda)), lda, group=m * lda, offset=offset),
        b=Matrix(rt.upload(place(b, ldb)), ldb, group=k * ldb, item=groups * k * ldb, offset=offset),
        groups=groups, items=items, bias=None if bias_mode == NO_BIAS else rt.upload(bias), bias_mode=bias_mode)
    q.finish()
    got = DeviceTensor(rt, c, (offset + items * groups * m * ldc,)).numpy()[offset:]
    exact = np.matmul(a.astype(np.float64), b)
    if bias_mode == ROW_BIAS:
        exact += bias[:, :, None]
    elif bias_mode == COLUMN_BIAS:
        exact += bias[:, None, :]
    return got.reshape(items, groups, m, ldc)[..., :n], exact, event


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (5, 3, 7), (37, 53, 29), (65, 17, 129), (6, 200, 3), (70, 40, 64)])
def test_both_gemm_kernels_on_odd_shapes(cl_runtime, variant, m, n, k):
    got, exact, _ = stacked_gemm(cl_runtime, variant, normal(1, m, k), normal(1, 1, k, n))
    assert_close(got, exact)


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
@pytest.mark.parametrize("bias_mode", [ROW_BIAS, COLUMN_BIAS])
def test_both_gemm_kernels_on_stacks_with_bias_padding_and_offsets(cl_runtime, variant, bias_mode):
    got, exact, event = stacked_gemm(cl_runtime, variant, normal(3, 19, 23), normal(2, 3, 23, 41),
                                     bias_mode=bias_mode, pad=5, offset=7)
    assert_close(got, exact)
    assert event.command_execution_status == cl.command_execution_status.COMPLETE


def reference_conv(x, w, b, stride, padding, dilation, groups):
    """Lesson 8's definition with einsum over the kernel windows, in float64."""
    cout, cin_g, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    spans = sliding_window_view(xp, (dilation * (kh - 1) + 1, dilation * (kw - 1) + 1), axis=(2, 3))
    windows = spans[:, :, ::stride, ::stride, ::dilation, ::dilation]  # (N, C, Ho, Wo, kh, kw)
    n, _, ho, wo = windows.shape[:4]
    windows = windows.reshape(n, groups, cin_g, ho, wo, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", windows, w.reshape(groups, cout // groups, cin_g, kh, kw))
    return out.reshape(n, cout, ho, wo) + b[None, :, None, None]


# (cin, cout, kernel, stride, padding, dilation, groups), the path forward_opencl takes, input size
CONVS = {
    "3x3": ((16, 16, 3, 1, 1, 1, 1), "winograd", (2, 16, 13, 11)),
    "3x3 few channels": ((5, 7, 3, 1, 1, 1, 1), "taps", (2, 5, 9, 10)),  # too few for Winograd (MIN_CPU_CHANNELS)
    "3x3 stride2 dilated grouped": ((6, 9, 3, 2, 2, 2, 3), "taps", (2, 6, 15, 12)),
    "7x7 stride2": ((3, 5, 7, 2, 3, 1, 1), "taps", (1, 3, 17, 20)),
    "7x7 stride2 small": ((3, 5, 7, 2, 3, 1, 1), "im2col", (1, 3, 5, 5)),  # a 3x3 output: a grid of 15 columns
    "1x1": ((12, 7, 1, 1, 0, 1, 1), "pointwise", (3, 12, 5, 9)),
    "1x1 grouped": ((12, 8, 1, 1, 0, 1, 4), "pointwise", (1, 12, 6, 6)),
    "1x1 stride2": ((12, 7, 1, 2, 0, 1, 1), "im2col", (1, 12, 9, 9)),
    "depthwise": ((10, 10, 3, 1, 1, 1, 10), "depthwise", (2, 10, 9, 14)),
    "depthwise x2 stride2": ((4, 8, 5, 2, 2, 1, 4), "depthwise padded", (1, 4, 11, 10)),  # 5x5: a padded copy
}


def conv_on_device(rt, case):
    (cin, cout, k, stride, padding, dilation, groups), _, shape = case
    w, b, x = normal(cout, cin // groups, k, k), normal(cout), normal(*shape)
    layer = make_layer("nn.Conv2d", backend="opencl", input_shapes=(shape,), attrs=dict(weight=w, bias=b), params=dict(
        in_channels=cin, out_channels=cout, kernel_size=[k, k], stride=[stride, stride], padding=[padding, padding],
        dilation=[dilation, dilation], groups=groups, bias=True))
    layer.build_opencl(rt)
    (out_shape,) = layer.output_shapes([shape])
    y = DeviceTensor(rt, rt.allocate(4 * int(np.prod(out_shape))), out_shape)
    q = Enqueuer(rt)
    q.begin(layer.op, ())
    layer.forward_opencl(q, [DeviceTensor(rt, rt.upload(x), shape)], [y])
    q.finish()
    reference = reference_conv(x, w, b, stride, padding, dilation, groups)
    return layer, y.numpy(), reference, q.events[layer.op.name]


def expected_kernels(path, rt, out_shape):
    if path == "winograd":  # input transform, GEMM, output transform on CPUs; a layer this small runs direct on GPUs
        return 3 if rt.is_cpu else 1
    if path in ("depthwise padded", "taps"):  # on CPUs the input is padded first
        return 2 if rt.is_cpu else 1
    if path == "im2col" and rt.is_cpu:  # im2col, then the GEMM; short rows: im2col_pixels in spans, then the rest
        if out_shape[-1] >= conv2d.IM2COL_ROW_WIDTH:
            return 2
        pixels, span = out_shape[-2] * out_shape[-1], conv2d.IM2COL_PIXEL_SPAN
        return (pixels >= span) + (pixels % span > 0) + 1
    return 1  # on a GPU the GEMM does im2col itself


@pytest.mark.parametrize("name", CONVS)
def test_every_convolution_path_matches_einsum(cl_runtime, name):
    layer, got, reference, events = conv_on_device(cl_runtime, CONVS[name])
    assert_close(got, reference)
    path = CONVS[name][1]
    assert (layer.cl_direct is not None) == path.startswith("depthwise")
    assert len(events) == expected_kernels(path, cl_runtime, got.shape)


@pytest.mark.parametrize("name", ["3x3", "3x3 stride2 dilated grouped", "1x1 grouped"])
def test_the_other_device_kinds_path_is_right_too(cl_runtime, monkeypatch, name):
    """The CPU path on a GPU, or implicit im2col in gemm_gpu on a CPU: slower there, but never wrong."""
    monkeypatch.setattr(cl_runtime, "is_cpu", not cl_runtime.is_cpu)
    _, got, reference, events = conv_on_device(cl_runtime, CONVS[name])
    assert_close(got, reference)
    assert len(events) == expected_kernels(CONVS[name][1], cl_runtime, got.shape)


def test_flops_from_shapes_and_gflops_from_events(cl_runtime):
    """The GEMMs of a convolution do 2 x its MACs in FLOPs; GFLOP/s come from the events (never asserted)."""
    case = CONVS["3x3 stride2 dilated grouped"]
    layer, _, _, events = conv_on_device(cl_runtime, case)
    (cin, cout, k, _, _, _, groups), _, shape = case
    (out_shape,) = layer.output_shapes([shape])
    m, n, kk, stack = cout // groups, out_shape[2] * out_shape[3], cin // groups * k * k, shape[0] * groups
    assert layer.w_gemm.shape == (groups, m, kk)
    np.testing.assert_array_equal(layer.w_gemm, layer.w_kernel.reshape(groups, m, kk))
    flops = 2 * m * n * kk * stack
    assert flops == 2 * layer.macs([shape], [out_shape]) == 2 * int(np.prod(out_shape)) * (cin // groups) * k * k
    for event in events:
        assert event.command_execution_status == cl.command_execution_status.COMPLETE
        assert event.profile.end >= event.profile.start >= event.profile.submit >= event.profile.queued
    seconds = sum((e.profile.end - e.profile.start) * 1e-9 for e in events)
    gflops = flops / seconds / 1e9 if seconds else float("inf")  # what a benchmark would report
    assert gflops > 0


def test_the_commands_in_the_notes(capsys, cl_runtime):
    outputs = check_shell_commands(16, capsys)
    profile = outputs["kuiper run --backend opencl --profile --repeat 3"]
    assert "matches the saved PyTorch output" in profile and "device ms" in profile
