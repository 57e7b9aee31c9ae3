"""Checkpoint of lesson 8: exercises/lesson_08.py's im2col with stride and dilation, convolution as im2col and
GEMM, and the multiply-accumulates of ResNet-18, held to kuiper's reference Conv2d (its kernel_windows view,
its forward, its macs)."""

import numpy as np
import pytest

import kuiper
from kuiper.runtime.backends import make_layer
from lesson_tools import RESNET, exercise

ex = exercise(8)

CASES = [  # Cin, Cout, kernel, stride, padding, dilation, groups, input (H, W), bias
    (4, 6, (3, 3), (1, 1), (1, 1), (1, 1), 1, (9, 8), True),
    (4, 6, (3, 3), (2, 2), (1, 1), (2, 1), 2, (9, 8), True),
    (3, 5, (3, 2), (2, 1), (0, 1), (1, 2), 1, (10, 9), False),
    (6, 6, (3, 3), (1, 1), (2, 2), (2, 2), 6, (7, 7), True),      # depthwise, dilated
    (8, 4, (1, 1), (1, 1), (0, 0), (1, 1), 1, (5, 6), False),     # 1x1
    (2, 4, (5, 5), (3, 3), (2, 2), (1, 1), 2, (11, 12), True),
]


def reference_layer(cin, cout, kernel, stride, padding, dilation, groups, size, bias, rng):
    w = rng.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    attrs = dict(weight=w, **({"bias": b} if bias else {}))
    layer = make_layer("nn.Conv2d", input_shapes=((2, cin, *size),), attrs=attrs, params=dict(
        in_channels=cin, out_channels=cout, kernel_size=list(kernel), stride=list(stride), padding=list(padding),
        dilation=list(dilation), groups=groups, bias=bias))
    return layer, w, b


@pytest.mark.parametrize("case", CASES, ids=str)
def test_im2col_is_the_kernel_windows_of_the_reference(case):
    cin, cout, kernel, stride, padding, dilation, groups, size, bias = case
    rng = np.random.default_rng(1)
    layer, _, _ = reference_layer(*case, rng)
    x = rng.standard_normal((1, cin, *size)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    windows = layer.kernel_windows(padded)[0]              # (C, kh, kw, Ho, Wo), a strided view
    c, kh, kw, ho, wo = windows.shape
    columns = ex.im2col(padded[0], kernel, stride, dilation)
    assert columns.shape == (c * kh * kw, ho * wo)
    np.testing.assert_array_equal(columns, windows.reshape(c * kh * kw, ho * wo))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_conv2d_is_the_reference_layer(case):
    cin, cout, kernel, stride, padding, dilation, groups, size, bias = case
    rng = np.random.default_rng(2)
    layer, w, b = reference_layer(*case, rng)
    x = rng.standard_normal((2, cin, *size)).astype(np.float32)
    got = ex.conv2d(x, w, b, stride, padding, dilation, groups)
    np.testing.assert_allclose(got, layer.run_numpy(x)[0], rtol=1e-4, atol=1e-4)


def test_conv_macs_of_resnet18_are_the_layers_own_count():
    graph = kuiper.load(RESNET, backend="reference")
    for shape in [(1, 3, 224, 224), (2, 3, 160, 200)]:
        plan = graph.plan_for(shape)
        expected = sum(op.layer.macs([plan.shapes[o.name] for o in op.input_operands],
                                     [plan.shapes[o.name] for o in op.output_operands])
                       for op in graph.operators if op.type == "nn.Conv2d")
        assert ex.conv_macs(graph, shape) == expected
    assert 1.80e9 < ex.conv_macs(graph, (1, 3, 224, 224)) < 1.83e9     # "about 1.8 G"
