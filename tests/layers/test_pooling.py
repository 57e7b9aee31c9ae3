"""MaxPool2d / AvgPool2d against a naive reference that builds every window from PyTorch's documented rules."""

import math

import numpy as np
import pytest

import kuiper.layers.pooling  # noqa: F401  (registers the layers)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(0)


def reference_size(size, kernel, stride, padding, dilation, ceil_mode):
    """The output length from the nn.MaxPool2d docs, plus the rule that a window starting in the right
    padding is dropped."""
    rounding = math.ceil if ceil_mode else math.floor
    count = rounding((size + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1
    if ceil_mode and (count - 1) * stride - padding >= size:
        count -= 1
    return count


def reference_pool(x, kind, kernel, stride, padding, dilation=(1, 1), ceil_mode=False,
                   count_include_pad=True, divisor_override=None):
    """Loop over output positions; for each, list the window's taps and reduce the ones inside the input.

    For averages, padding taps count towards the divisor only with count_include_pad, and taps past the
    right padding (a ceil_mode window hanging over the end) never count.
    """
    height, width = x.shape[-2:]
    out_h, out_w = (reference_size(n, kernel[a], stride[a], padding[a], dilation[a], ceil_mode)
                    for a, n in enumerate((height, width)))
    out = np.empty(x.shape[:-2] + (out_h, out_w), dtype=np.float64)
    for oh in range(out_h):
        for ow in range(out_w):
            rows = [oh * stride[0] - padding[0] + i * dilation[0] for i in range(kernel[0])]
            cols = [ow * stride[1] - padding[1] + j * dilation[1] for j in range(kernel[1])]
            inside_rows = [r for r in rows if 0 <= r < height]
            inside_cols = [c for c in cols if 0 <= c < width]
            values = x[..., inside_rows, :][..., inside_cols]
            if kind == "max":
                out[..., oh, ow] = values.max(axis=(-2, -1)) if values.size else -np.inf
                continue
            if divisor_override is not None:
                divisor = divisor_override
            elif count_include_pad:
                divisor = (sum(-padding[0] <= r < height + padding[0] for r in rows)
                           * sum(-padding[1] <= c < width + padding[1] for c in cols))
            else:
                divisor = len(inside_rows) * len(inside_cols)
            out[..., oh, ow] = values.sum(axis=(-2, -1)) / divisor
    return out


def max_pool(shape, kernel, stride=None, padding=(0, 0), dilation=(1, 1), ceil_mode=False, type="nn.MaxPool2d"):
    return make_layer(type, params=dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
                                        ceil_mode=ceil_mode, return_indices=False), input_shapes=[shape])


def avg_pool(shape, kernel, stride=None, padding=(0, 0), ceil_mode=False, count_include_pad=True,
             divisor_override=None, type="nn.AvgPool2d"):
    return make_layer(type, params=dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode,
                                        count_include_pad=count_include_pad, divisor_override=divisor_override),
                      input_shapes=[shape])


# (input shape, kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [
    ((1, 3, 7, 9), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((3, 2, 9, 7), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((3, 2, 9, 7), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((1, 4, 11, 6), (3, 2), (2, 1), (1, 1), (1, 1), True),
    ((2, 3, 10, 13), (2, 3), (1, 2), (0, 1), (2, 3), False),
    ((2, 3, 10, 13), (3, 2), (3, 2), (1, 1), (2, 2), True),
    ((1, 1, 3, 6), (2, 3), (2, 2), (1, 1), (1, 1), True),  # a window that would start in the padding
    ((3, 5, 8), (3, 3), (2, 3), (1, 0), (1, 1), True),  # an unbatched (C, H, W) input
]


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, ceil_mode", MAX_CASES)
def test_max_pool_matches_reference(shape, kernel, stride, padding, dilation, ceil_mode):
    x = RNG.standard_normal(shape).astype(np.float32)
    for type in ("nn.MaxPool2d", "F.max_pool2d"):
        layer = max_pool(shape, kernel, stride, padding, dilation, ceil_mode, type=type)
        (out,) = layer.run_numpy(x)
        expected = reference_pool(x, "max", kernel, stride, padding, dilation, ceil_mode)
        np.testing.assert_allclose(out, expected, rtol=1e-6)


# (input shape, kernel, stride, padding, ceil_mode)
AVG_CASES = [
    ((1, 3, 7, 9), (2, 2), (2, 2), (0, 0), False),
    ((3, 2, 9, 7), (3, 3), (2, 2), (1, 1), False),
    ((3, 2, 9, 7), (3, 3), (2, 2), (1, 1), True),
    ((1, 4, 11, 6), (3, 2), (2, 1), (1, 1), True),
    ((2, 3, 10, 13), (4, 5), (3, 2), (2, 2), True),
    ((1, 1, 3, 6), (2, 3), (2, 2), (1, 1), True),
    ((2, 5, 8), (3, 3), (2, 3), (1, 0), True),
]


@pytest.mark.parametrize("divisor_override", [None, 5])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode", AVG_CASES)
def test_avg_pool_matches_reference(shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = avg_pool(shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    (out,) = layer.run_numpy(x)
    expected = reference_pool(x, "avg", kernel, stride, padding, (1, 1), ceil_mode, count_include_pad,
                              divisor_override)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_ceil_mode_windows_past_the_padding_worked_example():
    # H=3: windows start at rows -1 and 1; a third would start at row 3, in the right padding, and is dropped.
    # W=6: the ceil_mode window at columns 5..7 is kept; column 6 is padding, column 7 lies past it.
    x = np.arange(18, dtype=np.float32).reshape(1, 1, 3, 6)
    args = dict(kernel=(2, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True)
    np.testing.assert_allclose(max_pool(x.shape, **args).run_numpy(x)[0][0, 0],
                               [[1, 3, 5, 5], [13, 15, 17, 17]])
    # with count_include_pad the last column divides by 2 * 2: column 7 is not counted
    np.testing.assert_allclose(avg_pool(x.shape, **args).run_numpy(x)[0][0, 0],
                               [[1 / 6, 1, 2, 1.25], [19 / 3, 11, 13, 7]], rtol=1e-6)
    np.testing.assert_allclose(avg_pool(x.shape, **args, count_include_pad=False).run_numpy(x)[0][0, 0],
                               [[0.5, 2, 4, 5], [9.5, 11, 13, 14]], rtol=1e-6)


def test_stride_none_means_kernel_size():
    x = RNG.standard_normal((1, 2, 7, 8)).astype(np.float32)
    for layer in (max_pool(x.shape, (3, 2), type="F.max_pool2d"), avg_pool(x.shape, (3, 2), type="F.avg_pool2d")):
        assert layer.stride == (3, 2)
        assert layer.output_shapes([x.shape]) == [(1, 2, 2, 4)]


def test_output_shapes_follow_the_input_not_the_recorded_shape():
    layer = max_pool((1, 3, 8, 8), (3, 3), (2, 2), (1, 1), ceil_mode=True)
    assert layer.output_shapes([(4, 3, 8, 8)]) == [(4, 3, 5, 5)]
    assert layer.output_shapes([(2, 16, 11, 6)]) == [(2, 16, 6, 4)]
    assert layer.output_shapes([(16, 5, 5)]) == [(16, 3, 3)]
    layer = avg_pool((1, 3, 8, 8), (2, 2))
    assert layer.output_shapes([(5, 7, 9, 3)]) == [(5, 7, 4, 1)]


def test_input_too_small_or_wrong_rank_is_a_shape_error():
    layer = max_pool((1, 1, 8, 8), (3, 3), (1, 1), (0, 0), dilation=(2, 2))
    with pytest.raises(ShapeError):
        layer.output_shapes([(1, 1, 4, 8)])
    with pytest.raises(ShapeError):
        layer.output_shapes([(8, 8)])


@pytest.mark.parametrize("params, message", [
    (dict(kernel_size=(2, 2), return_indices=True), "return_indices"),
    (dict(kernel_size=(3, 3), padding=(2, 0)), "padding"),
    (dict(kernel_size=(3, 3), padding=(0, -1)), "padding"),
    (dict(kernel_size=(2, 2), stride=(0, 1)), "stride"),
    (dict(kernel_size=(2, 2), dilation=(1, 0)), "dilation"),
    (dict(kernel_size=(0, 2)), "kernel"),
    (dict(kernel_size=(2, 2, 2)), "kernel_size"),
])
def test_max_pool_rejects_bad_parameters(params, message):
    with pytest.raises(LayerError, match=message):
        make_layer("nn.MaxPool2d", params=params, input_shapes=[(1, 1, 8, 8)])


def test_avg_pool_rejects_bad_parameters():
    with pytest.raises(LayerError, match="divisor_override"):
        make_layer("F.avg_pool2d", params=dict(kernel_size=(2, 2), divisor_override=0), input_shapes=[(1, 1, 4, 4)])
    with pytest.raises(LayerError, match="padding"):
        make_layer("nn.AvgPool2d", params=dict(kernel_size=(2, 4), padding=(2, 2)), input_shapes=[(1, 1, 4, 4)])
