"""nn.ConvTranspose2d against a direct scatter of every input pixel, in float64."""

import numpy as np
import pytest

import kuiper.layers.conv_transpose2d  # noqa: F401  (registers nn.ConvTranspose2d)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer


def conv_transpose2d_reference(x, weight, bias, stride, padding, output_padding, dilation, groups):
    """Input pixel (y, x) adds x[:, c, y, x] * weight[c, :, i, j] at output (y*s - p + i*d, x*s - p + j*d)."""
    x, weight = x.astype(np.float64), weight.astype(np.float64)
    n, cin, h, w = x.shape
    _, cout_g, kh, kw = weight.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = np.zeros((n, cout_g * groups, ho, wo))
    cin_g = cin // groups
    for g in range(groups):
        ins, outs = slice(g * cin_g, (g + 1) * cin_g), slice(g * cout_g, (g + 1) * cout_g)
        for y in range(h):
            for xi in range(w):
                for i in range(kh):
                    oy = y * sh - ph + i * dh
                    for j in range(kw):
                        ox = xi * sw - pw + j * dw
                        if 0 <= oy < ho and 0 <= ox < wo:
                            out[:, outs, oy, ox] += x[:, ins, y, xi] @ weight[ins, :, i, j]
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def make_deconv(rng, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, dilation=1,
                groups=1, bias=True, input_shape=(1, 1, 1, 1), backend="reference"):
    """A ConvTranspose2d layer of `backend` with random weights; returns (layer, weight, bias)."""
    weight = rng.standard_normal((in_channels, out_channels // groups, *pair(kernel_size))).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    params = dict(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                  padding=padding, output_padding=output_padding, dilation=dilation, groups=groups, bias=bias)
    attrs = {"weight": weight} if b is None else {"weight": weight, "bias": b}
    return (make_layer("nn.ConvTranspose2d", backend=backend, params=params, attrs=attrs, input_shapes=[input_shape]),
            weight, b)


def reference_for(case, x, weight, bias):
    return conv_transpose2d_reference(
        x, weight, bias, pair(case.get("stride", 1)), pair(case.get("padding", 0)),
        pair(case.get("output_padding", 0)), pair(case.get("dilation", 1)), case.get("groups", 1),
    )


def assert_matches(actual, expected):
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(expected).max()))


CASES = {
    "stride2 pad1 outpad1 groups2": dict(in_channels=6, out_channels=4, kernel_size=3, stride=2, padding=1,
                                         output_padding=1, groups=2, input_shape=(3, 6, 7, 5)),
    "asymmetric nobias": dict(in_channels=3, out_channels=5, kernel_size=(4, 3), stride=(2, 3), padding=(3, 0),
                              output_padding=(1, 2), bias=False, input_shape=(1, 3, 7, 5)),
    "1x1 input dilated depthwise": dict(in_channels=5, out_channels=5, kernel_size=3, dilation=2, groups=5,
                                        input_shape=(3, 5, 1, 1)),
    "kernel==stride upsample": dict(in_channels=4, out_channels=7, kernel_size=2, stride=2, input_shape=(1, 4, 5, 3)),
    "dilation3 groups2": dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=2, output_padding=2,
                              dilation=3, groups=2, input_shape=(3, 4, 5, 3)),
    "1x1 kernel": dict(in_channels=7, out_channels=3, kernel_size=1, input_shape=(1, 7, 9, 11)),
    "outpad beyond padding": dict(in_channels=3, out_channels=2, kernel_size=3, stride=2, output_padding=1,
                                  input_shape=(3, 3, 7, 5)),
    "kernel<stride": dict(in_channels=3, out_channels=5, kernel_size=2, stride=3, padding=1,
                          input_shape=(1, 3, 9, 11)),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_matches_reference(case):
    rng = np.random.default_rng(0)
    layer, weight, bias = make_deconv(rng, **case)
    x = rng.standard_normal(case["input_shape"]).astype(np.float32)
    assert_matches(layer.run_numpy(x)[0], reference_for(case, x, weight, bias))


def test_other_shapes_than_recorded_and_unbatched():
    rng = np.random.default_rng(1)
    case = dict(in_channels=6, out_channels=4, kernel_size=3, stride=2, padding=1, output_padding=1, groups=2)
    layer, weight, bias = make_deconv(rng, **case, input_shape=(1, 6, 7, 5))
    assert layer.output_shapes([(2, 6, 20, 1)]) == [(2, 4, 40, 2)]
    assert layer.output_shapes([(6, 3, 4)]) == [(4, 6, 8)]
    for shape in [(3, 6, 9, 11), (1, 6, 7, 5)]:  # buffers are reallocated when the shape changes
        x = rng.standard_normal(shape).astype(np.float32)
        assert_matches(layer.run_numpy(x)[0], reference_for(case, x, weight, bias))
    x = rng.standard_normal((6, 3, 4)).astype(np.float32)
    assert_matches(layer.run_numpy(x)[0], reference_for(case, x[None], weight, bias)[0])


def test_shape_errors():
    layer, _, _ = make_deconv(np.random.default_rng(2), 4, 6, 1, padding=1, input_shape=(1, 4, 7, 5))
    with pytest.raises(ShapeError, match="expects input"):
        layer.output_shapes([(1, 6, 7, 5)])
    with pytest.raises(ShapeError, match="empty output"):
        layer.output_shapes([(1, 4, 1, 5)])


@pytest.mark.parametrize("change, message", [
    (dict(output_padding=2), "output_padding"),  # not below stride=2 nor dilation=1
    (dict(padding_mode="reflect"), "padding_mode"),
    (dict(groups=4), "divisible by groups"),
    (dict(padding=(1, -1)), "padding"),
])
def test_bad_parameters(change, message):
    params = dict(in_channels=6, out_channels=4, kernel_size=3, stride=2, padding=1, dilation=1, groups=2,
                  bias=False)
    params.update(change)
    weight = np.zeros((6, 2, 3, 3), np.float32)
    with pytest.raises(LayerError, match=message):
        make_layer("nn.ConvTranspose2d", params=params, attrs={"weight": weight}, input_shapes=[(1, 6, 7, 5)])


@pytest.mark.parametrize("attrs, message", [
    ({"weight": np.zeros((4, 3, 3, 3), np.float32)}, "expected \\(6, 2, 3, 3\\)"),  # Conv2d's (out, in/g) layout
    ({}, "missing weight '@weight'"),
])
def test_bad_weights(attrs, message):
    params = dict(in_channels=6, out_channels=4, kernel_size=3, groups=2, bias=False)
    with pytest.raises(LayerError, match=message):
        make_layer("nn.ConvTranspose2d", params=params, attrs=attrs, input_shapes=[(1, 6, 7, 5)])
