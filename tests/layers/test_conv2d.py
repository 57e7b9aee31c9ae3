"""nn.Conv2d against a direct, loop-per-output-pixel convolution in float64."""

import numpy as np
import pytest

import kuiper.layers.conv2d  # noqa: F401  (registers nn.Conv2d)
from kuiper.errors import LayerError, ShapeError
from kuiper.layers.conv2d import F2, F4, Conv2d
from kuiper.runtime.operators import make_layer


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
              bias=True, input_shape=(1, 1, 1, 1), **extra):
    """A Conv2d layer with random weights; returns (layer, weight, bias)."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    weight = rng.standard_normal((out_channels, in_channels // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    params = dict(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                  padding=padding, dilation=dilation, groups=groups, bias=bias, padding_mode="zeros", **extra)
    attrs = {"weight": weight} if b is None else {"weight": weight, "bias": b}
    return make_layer("nn.Conv2d", params=params, attrs=attrs, input_shapes=[input_shape]), weight, b


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


@pytest.mark.parametrize("name", ["stride2 odd batch3 nobias", "same even kernel", "groups3 stride2",
                                  "kernel>stride asymmetric"])
def test_banded_im2col(monkeypatch, name):
    """A tiny column budget splits images into bands of 1 to 5 output rows, the last band often shorter."""
    monkeypatch.setattr(kuiper.layers.conv2d, "COLUMN_BYTES", 2500)
    test_matches_reference(CASES[name])


WINOGRAD_CASES = {
    "odd sizes batch3": dict(in_channels=5, out_channels=7, kernel_size=3, padding=1, input_shape=(3, 5, 9, 11)),
    "whole tiles nobias": dict(in_channels=7, out_channels=5, kernel_size=3, padding=1, bias=False,
                               input_shape=(1, 7, 8, 12)),
    "valid": dict(in_channels=7, out_channels=5, kernel_size=3, padding="valid", input_shape=(3, 7, 13, 10)),
    "asymmetric padding": dict(in_channels=5, out_channels=7, kernel_size=(3, 3), padding=(2, 0),
                               input_shape=(1, 5, 9, 11)),
    "same": dict(in_channels=5, out_channels=5, kernel_size=3, padding="same", input_shape=(3, 5, 6, 7)),
    "one pixel": dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, input_shape=(3, 4, 1, 1)),
}


@pytest.mark.parametrize("variant", [F4, F2], ids=["F4x4", "F2x2"])
@pytest.mark.parametrize("name", WINOGRAD_CASES)
def test_winograd_matches_reference(monkeypatch, variant, name):
    """Every 3x3 stride-1 geometry, on images too small to pick Winograd by themselves."""
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: variant)
    test_matches_reference(WINOGRAD_CASES[name])


@pytest.mark.parametrize("variant", [F4, F2], ids=["F4x4", "F2x2"])
def test_winograd_bands(monkeypatch, variant):
    """A small budget splits the tiles into bands of 2 tile rows, the last one shorter (3 or 5 tile rows)."""
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: variant)
    monkeypatch.setattr(kuiper.layers.conv2d, "WINOGRAD_BYTES", 6100)
    test_matches_reference(WINOGRAD_CASES["odd sizes batch3"])


@pytest.mark.parametrize("variant", [F4, F2], ids=["F4x4", "F2x2"])
@pytest.mark.parametrize("channels, size", [(64, 28), (256, 14)])
def test_winograd_accuracy_at_resnet_widths(monkeypatch, variant, channels, size):
    """Hundreds of channels summed in the transformed domain: the float32 error stays well inside the tolerance."""
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: variant)
    rng = np.random.default_rng(5)
    layer, weight, bias = make_conv(rng, channels, channels, 3, padding=1, input_shape=(1, channels, size, size))
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = bias.reshape(-1, 1, 1).astype(np.float64)
    for i in range(3):  # the definition one tap at a time over whole images: the loop reference is too slow here
        for j in range(3):
            expected = expected + np.einsum("oc,nchw->nohw", weight[:, :, i, j].astype(np.float64),
                                            padded[:, :, i:i + size, j:j + size])
    assert_matches(layer.run_numpy(x)[0], expected)


@pytest.mark.parametrize("variant", [F4, F2], ids=["F4x4", "F2x2"])
def test_winograd_buffer_reuse(monkeypatch, variant):
    """8x8 then 7x7 need the same number of tiles: the padding the 7x7 image reads must still be zeros."""
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: variant)
    rng = np.random.default_rng(8)
    layer, weight, bias = make_conv(rng, 5, 6, 3, padding=1, input_shape=(1, 5, 8, 8))
    for shape in [(1, 5, 8, 8), (1, 5, 7, 7), (3, 5, 8, 7), (1, 5, 8, 8), (1, 5, 7, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        expected = conv2d_reference(x, weight, bias, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
        assert_matches(layer.run_numpy(x)[0], expected)


def test_winograd_unbatched_input(monkeypatch):
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: F4)
    rng = np.random.default_rng(10)
    layer, weight, bias = make_conv(rng, 5, 7, 3, padding=1, input_shape=(5, 9, 11))
    x = rng.standard_normal((5, 9, 11)).astype(np.float32)
    expected = conv2d_reference(x[None], weight, bias, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)[0]
    assert_matches(layer.run_numpy(x)[0], expected)


def test_winograd_variants_share_a_layer():
    """One layer meeting image sizes that pick F(4x4), F(2x2) and im2col, back and forth."""
    rng = np.random.default_rng(9)
    layer, weight, bias = make_conv(rng, 3, 4, 3, padding=1, input_shape=(1, 3, 24, 24))
    for size in (24, 14, 7, 22, 24, 12):
        x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        expected = conv2d_reference(x, weight, bias, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
        assert_matches(layer.run_numpy(x)[0], expected)


def test_winograd_variant_by_output_size():
    """F(4x4) where the output has enough 4x4 tiles, F(2x2) where it has enough 2x2 ones, else im2col."""
    layer, _, _ = make_conv(np.random.default_rng(6), 8, 8, 3, padding=1, input_shape=(1, 8, 56, 56))
    assert layer.winograd_ok
    assert [layer._winograd_variant(s, s) for s in (56, 28, 23, 14, 11, 7)] == [F4, F4, F4, F2, F2, None]


@pytest.mark.parametrize("change", [dict(stride=2), dict(dilation=2), dict(groups=2), dict(kernel_size=(3, 1))])
def test_winograd_only_for_3x3_stride1_undilated_ungrouped(change):
    params = dict(in_channels=4, out_channels=4, kernel_size=3, padding=1)
    params.update(change)
    layer, _, _ = make_conv(np.random.default_rng(7), **params, input_shape=(1, 4, 56, 56))
    assert not layer.winograd_ok


def test_unbatched_input():
    rng = np.random.default_rng(1)
    layer, weight, bias = make_conv(rng, 5, 7, 3, stride=2, padding=1, input_shape=(5, 9, 11))
    x = rng.standard_normal((5, 9, 11)).astype(np.float32)
    assert layer.output_shapes([(5, 9, 11)]) == [(7, 5, 6)]
    expected = conv2d_reference(x[None], weight, bias, (2, 2), ((1, 1), (1, 1)), (1, 1), 1)[0]
    assert_matches(layer.run_numpy(x)[0], expected)


@pytest.mark.parametrize("groups", [1, 5])
def test_other_shapes_than_recorded_and_buffer_reuse(groups):
    """Shapes come from the input, not the .param; cached padding buffers follow shape changes."""
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


@pytest.mark.parametrize("change, message", [
    (dict(padding_mode="reflect"), "padding_mode"),
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


@pytest.fixture(params=[2, 3], ids=["2 threads", "3 threads"])
def threads_forced(request, monkeypatch):
    """kuiper's threads (cpu/threads.py) with every split worth making, whatever the size of the work."""
    from kuiper.cpu import threads

    monkeypatch.setattr(threads, "_count", request.param)
    monkeypatch.setattr(threads, "MIN_MACS", 1)
    return threads


@pytest.mark.parametrize("split", ["bands", "channels"])
@pytest.mark.parametrize("name", ["stride2 odd batch3 nobias", "groups3 stride2", "7x7 stride2 pad3",
                                  "depthwise multiplier same", "kernel<stride"])
def test_im2col_split_over_threads(threads_forced, monkeypatch, split, name):
    """Bands of output rows per thread, or (bands too thin) each band's input channels split, partial products
    summed; grouped convolutions of small images stay on one thread."""
    monkeypatch.setattr(threads_forced, "MIN_COLUMNS", 1 if split == "bands" else 10 ** 9)
    test_matches_reference(CASES[name])


@pytest.mark.parametrize("split", ["bands", "channels"])
@pytest.mark.parametrize("variant", [F4, F2], ids=["F4x4", "F2x2"])
@pytest.mark.parametrize("name", ["odd sizes batch3", "valid", "asymmetric padding"])
def test_winograd_split_over_threads(threads_forced, monkeypatch, split, variant, name):
    """Bands of tile rows per thread, or each band's input transformed once and its output channels split."""
    monkeypatch.setattr(kuiper.layers.conv2d, "WINOGRAD_BAND_TILES", 1 if split == "bands" else 10 ** 9)
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: variant)
    test_matches_reference(WINOGRAD_CASES[name])


def test_fused_activation_is_applied_to_every_band(threads_forced, monkeypatch):
    """A ReLU the graph fused into the convolution (Layer.fuse), on the banded, threaded path."""
    from kuiper.runtime.operators import make_layer

    monkeypatch.setattr(threads_forced, "MIN_COLUMNS", 1)
    monkeypatch.setattr(kuiper.layers.conv2d, "COLUMN_BYTES", 2500)
    case = CASES["kernel>stride asymmetric"]
    rng = np.random.default_rng(3)
    layer, weight, bias = make_conv(rng, **case)
    relu = make_layer("nn.ReLU", input_shapes=[None])
    assert relu.in_place and layer.fuse(relu)
    x = rng.standard_normal(case["input_shape"]).astype(np.float32)
    expected = conv2d_reference(x, weight, bias, (2, 1), ((2, 2), (0, 0)), (1, 1), 1)
    assert_matches(layer.run_numpy(x)[0], np.maximum(expected, 0))


@pytest.mark.parametrize("split", ["bands", "channels"])
@pytest.mark.parametrize("variant", [None, F4, F2], ids=["im2col", "F4x4", "F2x2"])
@pytest.mark.parametrize("name", ["odd sizes batch3", "whole tiles nobias"])
def test_fused_residual_then_activation_on_every_path(threads_forced, monkeypatch, split, variant, name):
    """A sum the graph fused into the convolution (Layer.fuse_add: inputs[1] is added), then a fused ReLU:
    relu(conv(x) + r), band by band, on whole and overhanging Winograd tiles, bands or channels split."""
    from kuiper.runtime.operators import make_layer

    least = 1 if split == "bands" else 10 ** 9
    monkeypatch.setattr(threads_forced, "MIN_COLUMNS", least)
    monkeypatch.setattr(kuiper.layers.conv2d, "WINOGRAD_BAND_TILES", least)
    monkeypatch.setattr(Conv2d, "_winograd_variant", lambda self, ho, wo: variant)
    case = WINOGRAD_CASES[name]
    rng = np.random.default_rng(4)
    layer, weight, bias = make_conv(rng, **case)
    assert layer.fuse_add() and layer.fuse(make_layer("nn.ReLU", input_shapes=[None]))
    assert not layer.fuse_add()  # one sum, and not after an activation
    x = rng.standard_normal(case["input_shape"]).astype(np.float32)
    expected = conv2d_reference(x, weight, bias, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    residual = rng.standard_normal(expected.shape).astype(np.float32)
    out = np.empty(expected.shape, np.float32)
    layer.forward_numpy([x, residual], [out])
    assert_matches(out, np.maximum(expected + residual, 0))


def test_fused_residual_on_a_pointwise_convolution():
    case = CASES["pointwise grouped"]
    rng = np.random.default_rng(6)
    layer, weight, bias = make_conv(rng, **case)
    assert layer.fuse_add()
    x = rng.standard_normal(case["input_shape"]).astype(np.float32)
    expected = conv2d_reference(x, weight, bias, (1, 1), ((0, 0), (0, 0)), (1, 1), 3)
    residual = rng.standard_normal(expected.shape).astype(np.float32)
    out = np.empty(expected.shape, np.float32)
    layer.forward_numpy([x, residual], [out])
    assert_matches(out, expected + residual)
