"""The reference nn.Conv2d (kuiper/layers/conv2d.py) against a direct, loop-per-output-pixel convolution in
float64. The fast CPU variants are held to this reference in tests/cpu/test_conv2d_fast.py."""

import numpy as np
import pytest

import kuiper.layers.conv2d  # noqa: F401  (registers nn.Conv2d)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer


def conv2d_reference(x, weight, bias, stride, pads, dilation, groups):
    """out[n, o, y, x] = bias[o] + sum over in-channels of o's group and taps (i, j) that land inside the input.

    `pads` is ((top, bottom), (left, right)); padding is never materialized, out-of-range taps are skipped.
    """
    x, weight = x.astype(np.float64), weight.astype(np.float64)
    n, _, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    (sh, sw), ((top, bottom), (left, right)), (dh, dw) = stride, pads, dilation
    ho = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wo = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, cout, ho, wo))
    for o in range(cout):
        g = o // (cout // groups)
        x_group = x[:, g * cin_g:(g + 1) * cin_g]
        for y in range(ho):
            for xo in range(wo):
                for i in range(kh):
                    iy = y * sh - top + i * dh
                    for j in range(kw):
                        ix = xo * sw - left + j * dw
                        if 0 <= iy < h and 0 <= ix < w:
                            out[:, o, y, xo] += x_group[:, :, iy, ix] @ weight[o, :, i, j]
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out


def make_conv(rng, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
              bias=True, input_shape=(1, 1, 1, 1), backend="reference", **extra):
    """A Conv2d layer of `backend` with random weights; returns (layer, weight, bias)."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    weight = rng.standard_normal((out_channels, in_channels // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    params = dict(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                  padding=padding, dilation=dilation, groups=groups, bias=bias, padding_mode="zeros") | extra
    attrs = {"weight": weight} if b is None else {"weight": weight, "bias": b}
    return make_layer("nn.Conv2d", backend=backend, params=params, attrs=attrs, input_shapes=[input_shape]), weight, b


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def torch_pads(padding, kernel_size, dilation):
    """((top, bottom), (left, right)) as PyTorch pads: 'same' puts the odd pixel at the bottom/right."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(pair(kernel_size), pair(dilation))]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in pair(padding))


def assert_matches(actual, expected):
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(expected).max()))


CASES = {
    "3x3 pad1 7x5": dict(in_channels=3, out_channels=5, kernel_size=3, padding=1, input_shape=(1, 3, 7, 5)),
    "stride2 odd batch3 nobias": dict(in_channels=5, out_channels=7, kernel_size=3, stride=2, padding=1,
                                      bias=False, input_shape=(3, 5, 9, 11)),
    "1x1 input 3x3 kernel": dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, input_shape=(3, 4, 1, 1)),
    "pointwise grouped": dict(in_channels=6, out_channels=9, kernel_size=1, groups=3, input_shape=(3, 6, 7, 5)),
    "1x1 stride2": dict(in_channels=5, out_channels=7, kernel_size=1, stride=2, input_shape=(1, 5, 9, 11)),
    "same even kernel": dict(in_channels=3, out_channels=5, kernel_size=(4, 2), padding="same",
                             input_shape=(3, 3, 7, 5)),
    "same dilated even kernel": dict(in_channels=3, out_channels=4, kernel_size=(2, 4), padding="same",
                                     dilation=(3, 2), input_shape=(1, 3, 9, 11)),
    "valid": dict(in_channels=3, out_channels=5, kernel_size=(3, 5), padding="valid", input_shape=(1, 3, 9, 11)),
    "dilation2": dict(in_channels=5, out_channels=7, kernel_size=3, padding=2, dilation=2, input_shape=(1, 5, 9, 11)),
    "groups3 stride2": dict(in_channels=6, out_channels=9, kernel_size=3, stride=2, padding=1, groups=3,
                            input_shape=(3, 6, 9, 11)),
    "depthwise stride2": dict(in_channels=5, out_channels=5, kernel_size=3, stride=2, padding=1, groups=5,
                              input_shape=(3, 5, 9, 11)),
    "depthwise multiplier same": dict(in_channels=5, out_channels=10, kernel_size=(3, 2), padding="same",
                                      dilation=2, groups=5, bias=False, input_shape=(1, 5, 7, 5)),
    "depthwise 1x1": dict(in_channels=7, out_channels=7, kernel_size=1, groups=7, input_shape=(3, 7, 7, 5)),
    "single in-channel": dict(in_channels=1, out_channels=4, kernel_size=3, padding=1, input_shape=(3, 1, 7, 5)),
    "7x7 stride2 pad3": dict(in_channels=3, out_channels=8, kernel_size=7, stride=2, padding=3,
                             input_shape=(1, 3, 9, 11)),
    "kernel>stride asymmetric": dict(in_channels=5, out_channels=7, kernel_size=5, stride=(2, 1), padding=(2, 0),
                                     input_shape=(3, 5, 9, 11)),
    "kernel<stride": dict(in_channels=3, out_channels=5, kernel_size=2, stride=3, input_shape=(1, 3, 7, 5)),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_matches_reference(case):
    rng = np.random.default_rng(0)
    layer, weight, bias = make_conv(rng, **case)
    x = rng.standard_normal(case["input_shape"]).astype(np.float32)
    expected = conv2d_reference(
        x, weight, bias, pair(case.get("stride", 1)),
        torch_pads(case.get("padding", 0), case["kernel_size"], case.get("dilation", 1)),
        pair(case.get("dilation", 1)), case.get("groups", 1),
    )
    assert_matches(layer.run_numpy(x)[0], expected)


def test_unbatched_input():
    rng = np.random.default_rng(1)
    layer, weight, bias = make_conv(rng, 5, 7, 3, stride=2, padding=1, input_shape=(5, 9, 11))
    x = rng.standard_normal((5, 9, 11)).astype(np.float32)
    assert layer.output_shapes([(5, 9, 11)]) == [(7, 5, 6)]
    expected = conv2d_reference(x[None], weight, bias, (2, 2), ((1, 1), (1, 1)), (1, 1), 1)[0]
    assert_matches(layer.run_numpy(x)[0], expected)


@pytest.mark.parametrize("groups", [1, 5])
def test_other_shapes_than_recorded(groups):
    """Shapes come from the input, not the .param."""
    rng = np.random.default_rng(2)
    layer, weight, bias = make_conv(rng, 5, 5, 3, padding=1, groups=groups, input_shape=(1, 5, 7, 5))
    assert layer.output_shapes([(4, 5, 20, 30)]) == [(4, 5, 20, 30)]
    for shape in [(1, 5, 7, 5), (3, 5, 9, 11), (1, 5, 7, 5)]:
        x = rng.standard_normal(shape).astype(np.float32)
        expected = conv2d_reference(x, weight, bias, (1, 1), ((1, 1), (1, 1)), (1, 1), groups)
        assert_matches(layer.run_numpy(x)[0], expected)


def test_output_shapes_strided_same_and_dilated():
    rng = np.random.default_rng(3)
    strided, _, _ = make_conv(rng, 3, 8, 7, stride=2, padding=3, input_shape=(1, 3, 224, 224))
    assert strided.output_shapes([(2, 3, 225, 31)]) == [(2, 8, 113, 16)]
    same, _, _ = make_conv(rng, 3, 4, (4, 2), padding="same", dilation=(1, 3), input_shape=(1, 3, 8, 8))
    assert same.output_shapes([(1, 3, 5, 1)]) == [(1, 4, 5, 1)]


@pytest.mark.parametrize("shape", [(1, 4, 7, 5), (4, 7, 5), (3, 7, 5, 1, 1), (7, 5)])
def test_wrong_input_rank_or_channels(shape):
    layer, _, _ = make_conv(np.random.default_rng(4), 3, 5, 3, padding=1, input_shape=(1, 3, 7, 5))
    with pytest.raises(ShapeError, match="expects input"):
        layer.output_shapes([shape])


def test_input_smaller_than_kernel():
    layer, _, _ = make_conv(np.random.default_rng(4), 3, 5, 5, dilation=2, padding=1, input_shape=(1, 3, 9, 9))
    with pytest.raises(ShapeError, match="smaller than the kernel"):
        layer.output_shapes([(1, 3, 6, 20)])


NUMPY_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("case", [
    dict(in_channels=4, out_channels=4, kernel_size=3, stride=2, padding=1, groups=4, input_shape=(2, 4, 8, 8)),
    dict(in_channels=3, out_channels=5, kernel_size=(3, 2), padding=(2, 1), dilation=(1, 2), input_shape=(1, 3, 6, 7)),
    dict(in_channels=3, out_channels=6, kernel_size=3, padding=1, input_shape=(1, 3, 9, 9)),
], ids=["tresnet-blur", "dilated", "3x3"])
def test_padding_modes_pad_the_input_first(mode, case):
    # TResNet as pnnx writes it: its F.pad(mode="reflect") folded into the blur as `padding_mode=reflect`
    from conftest import assert_every_path_matches_reference

    rng = np.random.default_rng(8)
    layer, weight, bias = make_conv(rng, **case, padding_mode=mode)
    x = rng.standard_normal(case["input_shape"]).astype(np.float32)
    pads = torch_pads(case["padding"], case["kernel_size"], case.get("dilation", 1))
    padded = np.pad(x, ((0, 0), (0, 0), *pads), mode=NUMPY_PAD_MODES[mode])
    expected = conv2d_reference(padded, weight, bias, pair(case.get("stride", 1)), ((0, 0), (0, 0)),
                                pair(case.get("dilation", 1)), case.get("groups", 1))
    assert layer.output_shapes([x.shape]) == [expected.shape]
    assert_matches(layer.run_numpy(x)[0], expected)
    params = {key: value for key, value in layer.op.params.items()}
    assert_every_path_matches_reference("nn.Conv2d", x, params={k: v.value for k, v in params.items()},
                                        attrs={k: v.numpy() for k, v in layer.op.attrs.items()})


def test_reflect_padding_refuses_pads_as_large_as_the_input():
    layer, _, _ = make_conv(np.random.default_rng(9), 2, 2, 3, padding=2, padding_mode="reflect",
                            input_shape=(1, 2, 5, 5))
    with pytest.raises(ShapeError, match=r"padding_mode=reflect cannot pad dim -2 of a \(1, 2, 2, 5\) input by "
                                         r"\(2, 2\)"):
        layer.output_shapes([(1, 2, 2, 5)])


@pytest.mark.parametrize("change, message", [
    (dict(padding_mode="symmetric"), "padding_mode"),
    (dict(padding="full"), "padding"),
    (dict(padding="same", stride=2), "same"),
    (dict(groups=2), "divisible by groups"),
    (dict(kernel_size=0), "kernel_size"),
    (dict(stride=(1, 0)), "stride"),
    (dict(padding=-1), "padding"),
])
def test_bad_parameters(change, message):
    params = dict(in_channels=3, out_channels=6, kernel_size=3, stride=1, padding=1, dilation=1, groups=1,
                  bias=False, padding_mode="zeros")
    params.update(change)
    weight = np.zeros((6, 3, 3, 3), np.float32)
    with pytest.raises(LayerError, match=message):
        make_layer("nn.Conv2d", params=params, attrs={"weight": weight}, input_shapes=[(1, 3, 7, 5)])


@pytest.mark.parametrize("attrs, message", [
    ({"weight": np.zeros((6, 6, 3, 3), np.float32), "bias": np.zeros(6, np.float32)},
     "expected \\(6, 2, 3, 3\\)"),  # laid out as if groups were 1
    ({"weight": np.zeros((6, 2, 3, 3), np.float32), "bias": np.zeros(5, np.float32)}, "@bias"),
    ({"weight": np.zeros((6, 2, 3, 3), np.float32)}, "missing weight '@bias'"),
    ({"bias": np.zeros(6, np.float32)}, "missing weight '@weight'"),
])
def test_bad_weights(attrs, message):
    params = dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=3, bias=True)
    with pytest.raises(LayerError, match=message):
        make_layer("nn.Conv2d", params=params, attrs=attrs, input_shapes=[(1, 6, 7, 5)])
