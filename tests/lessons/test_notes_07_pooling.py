"""The claims of lesson 7: pooling layers against textbook loops written from PyTorch's definitions."""

import numpy as np
import pytest

import kuiper
from kuiper.layers.pooling import pooled_size
from kuiper.runtime.backends import make_layer
from lesson_tools import MODELS, check_shell_commands, model_case, param_lines


def out_size(size, k, s, p, d, ceil):
    """PyTorch's pooling output size, with its rule against a last window starting in the padding."""
    span = size + 2 * p - d * (k - 1) - 1
    count = (-(-span // s) if ceil else span // s) + 1
    if ceil and (count - 1) * s >= size + p:
        count -= 1
    return count


def max_pool_loops(x, k, s, p, d, ceil):
    n, c, h, w = x.shape
    ho, wo = out_size(h, k[0], s[0], p[0], d[0], ceil), out_size(w, k[1], s[1], p[1], d[1], ceil)
    out = np.full((n, c, ho, wo), -np.inf, dtype=np.float32)
    for oh in range(ho):
        for ow in range(wo):
            for i in range(k[0]):
                for j in range(k[1]):
                    row, col = oh * s[0] - p[0] + i * d[0], ow * s[1] - p[1] + j * d[1]
                    if 0 <= row < h and 0 <= col < w:
                        out[:, :, oh, ow] = np.maximum(out[:, :, oh, ow], x[:, :, row, col])
    return out


def avg_pool_loops(x, k, s, p, ceil, count_include_pad, divisor_override=None):
    n, c, h, w = x.shape
    ho, wo = out_size(h, k[0], s[0], p[0], 1, ceil), out_size(w, k[1], s[1], p[1], 1, ceil)
    out = np.zeros((n, c, ho, wo), dtype=np.float64)
    for oh in range(ho):
        for ow in range(wo):
            h0, w0 = oh * s[0] - p[0], ow * s[1] - p[1]
            h1, w1 = min(h0 + k[0], h + p[0]), min(w0 + k[1], w + p[1])
            with_padding = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            total = x[:, :, h0:h1, w0:w1].astype(np.float64).sum(axis=(2, 3))
            if divisor_override is not None:
                divisor = divisor_override
            else:
                divisor = with_padding if count_include_pad else (h1 - h0) * (w1 - w0)
            out[:, :, oh, ow] = total / divisor
    return out


def adaptive_loops(x, out_hw, reduce):
    n, c, h, w = x.shape
    out = np.empty((n, c) + tuple(out_hw), dtype=np.float64)
    for i in range(out_hw[0]):
        for j in range(out_hw[1]):
            rows = slice(i * h // out_hw[0], -(-(i + 1) * h // out_hw[0]))
            cols = slice(j * w // out_hw[1], -(-(j + 1) * w // out_hw[1]))
            out[:, :, i, j] = reduce(x[:, :, rows, cols].astype(np.float64), axis=(2, 3))
    return out


def random_input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


MAX_CASES = [
    # (H, W), kernel, stride, padding, dilation, ceil_mode
    ((7, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((7, 9), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((13, 11), (3, 3), (3, 3), (1, 1), (1, 1), True),
    ((13, 11), (2, 3), (1, 2), (0, 0), (2, 1), False),
    ((5, 6), (3, 2), (2, 3), (1, 1), (2, 1), True),
    ((8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
]


@pytest.mark.parametrize("hw,k,s,p,d,ceil", MAX_CASES)
def test_max_pool_matches_loops(hw, k, s, p, d, ceil):
    x = random_input((2, 3) + hw)
    layer = make_layer("nn.MaxPool2d", input_shapes=(x.shape,), params=dict(
        kernel_size=list(k), stride=list(s), padding=list(p), dilation=list(d), ceil_mode=ceil))
    (got,) = layer.run_numpy(x)
    expected = max_pool_loops(x, k, s, p, d, ceil)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


AVG_CASES = [
    # (H, W), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ((7, 9), (3, 3), (2, 2), (1, 1), False, True, None),
    ((7, 9), (3, 3), (2, 2), (1, 1), False, False, None),
    ((13, 11), (3, 3), (3, 3), (1, 1), True, False, None),
    ((13, 11), (3, 2), (2, 2), (1, 0), True, True, None),
    ((13, 11), (2, 2), (2, 2), (0, 0), False, True, 3),
    ((1, 5), (1, 2), (1, 2), (0, 0), True, True, None),
    ((6, 7), (2, 4), (3, 2), (1, 2), True, True, None),
]


@pytest.mark.parametrize("hw,k,s,p,ceil,include,override", AVG_CASES)
def test_avg_pool_matches_loops(hw, k, s, p, ceil, include, override):
    x = random_input((2, 3) + hw, seed=1)
    layer = make_layer("nn.AvgPool2d", input_shapes=(x.shape,), params=dict(
        kernel_size=list(k), stride=list(s), padding=list(p), ceil_mode=ceil, count_include_pad=include,
        divisor_override=override))
    (got,) = layer.run_numpy(x)
    expected = avg_pool_loops(x, k, s, p, ceil, include, override)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hw,out_hw", [((13, 11), (3, 4)), ((13, 11), (5, 3)), ((7, 7), (1, 1)),
                                       ((6, 9), (3, 3)), ((5, 4), (7, 2))])
def test_adaptive_pooling_matches_loops(hw, out_hw):
    x = random_input((2, 3) + hw, seed=2)
    avg = make_layer("nn.AdaptiveAvgPool2d", input_shapes=(x.shape,), params=dict(output_size=list(out_hw)))
    np.testing.assert_allclose(avg.run_numpy(x)[0], adaptive_loops(x, out_hw, np.mean), rtol=1e-5, atol=1e-6)
    big = make_layer("nn.AdaptiveMaxPool2d", input_shapes=(x.shape,), params=dict(output_size=list(out_hw)))
    np.testing.assert_array_equal(big.run_numpy(x)[0], adaptive_loops(x, out_hw, np.max).astype(np.float32))


def test_pooled_size_agrees_with_the_shapes_pytorch_recorded():
    """Every fixed-window pooling in pool_zoo: the output shape in the file is what PyTorch produced."""
    checked = 0
    for tokens in param_lines(MODELS / "pool_zoo" / "pool_zoo.pnnx.param"):
        if tokens[0] not in ("nn.MaxPool2d", "nn.AvgPool2d"):
            continue
        kv = dict(t.split("=", 1) for t in tokens[6:])
        pair = lambda key, default="(1,1)": [int(v) for v in kv.get(key, default).strip("()").split(",")]
        k, s, p, d = pair("kernel_size"), pair("stride"), pair("padding"), pair("dilation")
        ceil = kv["ceil_mode"] == "True"
        in_shape = [int(v) for v in kv["#" + tokens[4]].split(")")[0][1:].split(",")]
        out_shape = [int(v) for v in kv["#" + tokens[5]].split(")")[0][1:].split(",")]
        for axis in (0, 1):
            size = in_shape[2 + axis]
            assert pooled_size(size, k[axis], s[axis], p[axis], d[axis], ceil) == out_shape[2 + axis]
            assert out_size(size, k[axis], s[axis], p[axis], d[axis], ceil) == out_shape[2 + axis]
        checked += 1
    assert checked == 5


def test_ceil_mode_correction_examples():
    assert pooled_size(5, 3, 3, 1, 1, True) == 2       # ceil((5+2-3)/3)+1 = 3 would start in the padding
    assert pooled_size(11, 3, 3, 1, 1, True) == 4
    assert pooled_size(5, 2, 2, 0, 1, True) == 3 and pooled_size(5, 2, 2, 0, 1, False) == 2


def test_pool_zoo_matches_pytorch():
    param, inputs, expected = model_case("pool_zoo", "b2")
    outputs = kuiper.load(param, backend="numpy").forward(*inputs)
    assert len(outputs) == len(expected) == 7
    for got, want in zip(outputs, expected):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(7, capsys)
