"""The claims of lesson 8: the reference Conv2d against direct loops, its kernel windows against their definition,
im2col + GEMM by hand, and PyTorch's conv_zoo output."""

import numpy as np
import pytest

import kuiper
from kuiper.layers.conv2d import Conv2d
from kuiper.runtime.backends import make_layer
from lesson_tools import RESNET, check_shell_commands, model_case


def conv_loops(x, w, b, stride, pad, dil, groups):
    """The textbook definition, one multiply-accumulate at a time over channels and taps, in float64."""
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    cout_g = cout // groups
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, cout, ho, wo))
    for co in range(cout):
        g = co // cout_g
        for oh in range(ho):
            for ow in range(wo):
                total = np.full(n, 0.0 if b is None else float(b[co]))
                for ci in range(cin_g):
                    for i in range(kh):
                        row = oh * stride[0] - pad[0] + i * dil[0]
                        if not 0 <= row < h:
                            continue  # zero padding adds nothing
                        for j in range(kw):
                            col = ow * stride[1] - pad[1] + j * dil[1]
                            if 0 <= col < wd:
                                total += float(w[co, ci, i, j]) * x[:, g * cin_g + ci, row, col]
                out[:, co, oh, ow] = total
    return out


CASES = [
    # cin, cout, (H, W), kernel, stride, padding, dilation, groups, bias
    (3, 4, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    (3, 5, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1), 1, True),
    (4, 6, (9, 8), (3, 2), (2, 1), (1, 0), (2, 1), 2, True),
    (4, 4, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1), 4, False),   # depthwise
    (6, 3, (5, 7), (1, 1), (1, 1), (0, 0), (1, 1), 1, True),    # pointwise
    (6, 4, (5, 7), (1, 1), (2, 2), (0, 0), (1, 1), 2, False),   # 1x1 with stride and groups
    (2, 3, (8, 9), (5, 3), (3, 2), (2, 1), (1, 2), 1, True),
]


@pytest.mark.parametrize("cin,cout,hw,k,s,p,d,groups,bias", CASES)
def test_conv2d_matches_direct_loops(cin, cout, hw, k, s, p, d, groups, bias):
    rng = np.random.default_rng(cin * 10 + cout)
    x = rng.standard_normal((2, cin) + hw).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups) + k).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    attrs = dict(weight=w, bias=b) if bias else dict(weight=w)
    layer = make_layer("nn.Conv2d", input_shapes=(x.shape,), attrs=attrs, params=dict(
        in_channels=cin, out_channels=cout, kernel_size=list(k), stride=list(s), padding=list(p),
        dilation=list(d), groups=groups, bias=bias))
    (got,) = layer.run_numpy(x)
    expected = conv_loops(x, w, b, s, p, d, groups)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def conv_shift_and_add(x, w, b, stride, pad, dil):
    """The same definition summed tap by tap over whole images (groups=1), in float64: fast enough for
    images of ResNet's sizes, which direct loops in Python are not."""
    n, cin, h, wd = x.shape
    cout, _, kh, kw = w.shape
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    out = np.zeros((n, cout, ho, wo)) + (0.0 if b is None else b.reshape(-1, 1, 1))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dil[0], i * dil[0] + stride[0] * (ho - 1) + 1, stride[0])
            cols = slice(j * dil[1], j * dil[1] + stride[1] * (wo - 1) + 1, stride[1])
            out += np.einsum("oc,nchw->nohw", w[:, :, i, j].astype(np.float64), xp[:, :, rows, cols])
    return out


@pytest.mark.parametrize("cin,cout,hw,stride,pad", [
    (16, 24, (28, 28), (1, 1), (1, 1)),   # the ResNet 3x3 case
    (8, 8, (33, 21), (1, 1), (1, 1)),     # sizes that do not divide into tiles
    (8, 12, (30, 30), (1, 1), (0, 0)),    # no padding
    (16, 16, (28, 28), (2, 2), (1, 1)),   # stride 2
])
def test_conv2d_matches_the_definition_on_larger_images(cin, cout, hw, stride, pad):
    rng = np.random.default_rng(cin + cout + hw[0])
    x = rng.standard_normal((2, cin) + hw).astype(np.float32)
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    layer = make_layer("nn.Conv2d", input_shapes=(x.shape,), attrs=dict(weight=w, bias=b), params=dict(
        in_channels=cin, out_channels=cout, kernel_size=[3, 3], stride=list(stride), padding=list(pad)))
    (got,) = layer.run_numpy(x)
    expected = conv_shift_and_add(x, w, b, stride, pad, (1, 1))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k, s, d", [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (2, 1)), ((5, 3), (3, 2), (1, 2))])
def test_kernel_windows_are_a_view_with_the_defined_entries(k, s, d):
    """Entry [n, c, i, j, y, x] of the windows is padded[n, c, y*sh + i*dh, x*sw + j*dw], read through strides."""
    rng = np.random.default_rng(7)
    padded = rng.standard_normal((2, 3, 13, 12)).astype(np.float32)
    layer = make_layer("nn.Conv2d", input_shapes=((2, 3, 13, 12),), attrs=dict(weight=np.zeros((4, 3) + k, np.float32)),
                       params=dict(in_channels=3, out_channels=4, kernel_size=list(k), stride=list(s), dilation=list(d),
                                   bias=False))
    windows = layer.kernel_windows(padded)
    ho, wo = layer.output_shapes([padded.shape])[0][-2:]
    assert windows.shape == (2, 3) + k + (ho, wo)
    assert np.shares_memory(windows, padded) and not windows.flags.writeable
    for n, c, i, j, y, x in np.ndindex(windows.shape):
        assert windows[n, c, i, j, y, x] == padded[n, c, y * s[0] + i * d[0], x * s[1] + j * d[1]]


def test_im2col_then_gemm_is_the_convolution():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 6, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    columns = np.stack([xp[c, i:i + 6, j:j + 7].reshape(-1)
                        for c in range(3) for i in range(3) for j in range(3)])
    assert columns.shape == (27, 42)
    gemm = (w.reshape(4, -1) @ columns).reshape(1, 4, 6, 7)
    np.testing.assert_allclose(gemm, conv_loops(x, w, None, (1, 1), (1, 1), (1, 1), 1), rtol=1e-4, atol=1e-4)


def test_pointwise_convolution_is_a_matrix_product():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 8, 4, 5)).astype(np.float32)
    w = rng.standard_normal((5, 8, 1, 1)).astype(np.float32)
    layer = make_layer("nn.Conv2d", input_shapes=(x.shape,), attrs=dict(weight=w), params=dict(
        in_channels=8, out_channels=5, kernel_size=[1, 1], bias=False))
    expected = np.stack([w[:, :, 0, 0] @ image.reshape(8, -1) for image in x]).reshape(3, 5, 4, 5)
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected, rtol=1e-5, atol=1e-5)


def test_conv_zoo_matches_pytorch():
    param, inputs, expected = model_case("conv_zoo", "b2")
    graph = kuiper.load(param, backend="reference")  # the reference layers, as this lesson reads them
    assert all(type(op.layer) is Conv2d for op in graph.operators if op.type == "nn.Conv2d")
    outputs = graph.forward(*inputs)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def test_resnet18_convolutions_do_about_1_8_g_macs():
    """The figure exercise 3 asks for, "about 1.8 G", as kuiper's own layers count it."""
    graph = kuiper.load(RESNET, backend="reference")
    plan = graph.plan_for((1, 3, 224, 224))
    total = sum(op.layer.macs([plan.shapes[o.name] for o in op.input_operands],
                              [plan.shapes[o.name] for o in op.output_operands])
                for op in graph.operators if op.type == "nn.Conv2d")
    assert 1.80e9 < total < 1.83e9


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(8, capsys)
