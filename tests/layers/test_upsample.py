"""Upsample / interpolate against a per-pixel reference of PyTorch's sampling rules.

PyTorch's CPU kernels compute where an output pixel samples the input in float32; so does the reference,
because a float64 coordinate can land on the other side of an integer and pick another nearest pixel.
"""

import math

import numpy as np
import pytest

import kuiper.layers.upsample  # noqa: F401  (registers the layers)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(2)
f32 = np.float32


def input_step(in_size, out_size, align_corners, scale):
    """Input pixels per output pixel: corners aligned, else 1/scale_factor when given, else the size ratio."""
    if align_corners:
        return f32(in_size - 1) / f32(out_size - 1) if out_size > 1 else f32(0)
    return f32(1.0 / scale) if scale else f32(in_size) / f32(out_size)


def nearest_index(o, in_size, out_size, scale, exact):
    if not exact and out_size == in_size:
        return o
    if not exact and out_size == 2 * in_size:
        return o // 2
    step = input_step(in_size, out_size, False, scale)
    source = f32((o + 0.5) * step) if exact else f32(o) * step
    return min(math.floor(source), in_size - 1)


def source_coordinate(o, in_size, out_size, align_corners, scale, cubic):
    """The input coordinate output pixel o samples; the pixel centres i + 0.5 line up unless align_corners."""
    step = input_step(in_size, out_size, align_corners, scale)
    if align_corners:
        return step * f32(o)
    source = step * (f32(o) + f32(0.5)) - f32(0.5)
    return source if cubic else max(source, f32(0))


def linear_weights(o, in_size, out_size, align_corners, scale):
    """{input index: weight} for output pixel o along one axis."""
    if out_size == in_size:
        return {o: 1.0}
    source = source_coordinate(o, in_size, out_size, align_corners, scale, cubic=False)
    left = min(math.floor(source), in_size - 1)
    frac = min(max(source - left, 0.0), 1.0)
    right = min(left + 1, in_size - 1)
    weights = {left: 1 - frac}
    weights[right] = weights.get(right, 0.0) + frac
    return weights


def keys_cubic(d, a=-0.75):
    """The cubic convolution kernel (Keys, 1981) with PyTorch's a = -0.75."""
    d = abs(d)
    if d <= 1:
        return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    if d < 2:
        return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
    return 0.0


def cubic_weights(o, in_size, out_size, align_corners, scale):
    source = source_coordinate(o, in_size, out_size, align_corners, scale, cubic=True)
    left = min(math.floor(source), in_size - 1)
    frac = min(max(source - left, 0.0), 1.0)
    weights = {}
    for k in range(-1, 3):  # the four nearest pixels; beyond the edge the edge pixel repeats
        index = min(max(left + k, 0), in_size - 1)
        weights[index] = weights.get(index, 0.0) + keys_cubic(k - frac)
    return weights


def reference_resize(x, out_h, out_w, mode, align_corners=False, scales=(None, None)):
    in_h, in_w = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + (out_h, out_w), dtype=np.float64)
    for oh in range(out_h):
        for ow in range(out_w):
            if mode.startswith("nearest"):
                exact = mode == "nearest-exact"
                rows = {nearest_index(oh, in_h, out_h, scales[0], exact): 1.0}
                cols = {nearest_index(ow, in_w, out_w, scales[1], exact): 1.0}
            else:
                weights = linear_weights if mode == "bilinear" else cubic_weights
                rows = weights(oh, in_h, out_h, align_corners, scales[0])
                cols = weights(ow, in_w, out_w, align_corners, scales[1])
            for ih, wh in rows.items():
                for iw, ww in cols.items():
                    out[..., oh, ow] += wh * ww * x[..., ih, iw]
    return out


def upsample(shape, type="nn.Upsample", **params):
    return make_layer(type, params=params, input_shapes=[shape])


SHAPES = [(1, 2, 5, 7), (3, 2, 6, 4)]
SCALES = [(2.0, 2.0), (1.5, 1.5), (2.0, 1.5), (0.5, 0.75), (3.0, 1.0)]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("scale_factor", SCALES)
@pytest.mark.parametrize("shape", SHAPES)
def test_nearest_with_scale_factor(shape, scale_factor, mode):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = upsample(shape, "F.interpolate", mode=mode, scale_factor=scale_factor)
    (out,) = layer.run_numpy(x)
    out_h, out_w = (math.floor(n * s) for n, s in zip(shape[-2:], scale_factor))
    np.testing.assert_array_equal(out, reference_resize(x, out_h, out_w, mode, scales=scale_factor))


@pytest.mark.parametrize("size", [(10, 14), (3, 11), (9, 5)])
@pytest.mark.parametrize("shape", SHAPES)
def test_nearest_with_size(shape, size):
    x = RNG.standard_normal(shape).astype(np.float32)
    (out,) = upsample(shape, "F.upsample_nearest", size=size).run_numpy(x)
    np.testing.assert_array_equal(out, reference_resize(x, *size, "nearest"))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("scale_factor", SCALES)
@pytest.mark.parametrize("shape", SHAPES)
def test_interpolating_modes_with_scale_factor(shape, scale_factor, align_corners, mode):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = upsample(shape, "F.upsample", mode=mode, align_corners=align_corners, scale_factor=scale_factor)
    (out,) = layer.run_numpy(x)
    out_h, out_w = (math.floor(n * s) for n, s in zip(shape[-2:], scale_factor))
    expected = reference_resize(x, out_h, out_w, mode, align_corners, scales=scale_factor)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(10, 14), (3, 11), (1, 1)])
@pytest.mark.parametrize("shape", SHAPES)
def test_interpolating_modes_with_size(shape, size, align_corners, mode):
    x = RNG.standard_normal(shape).astype(np.float32)
    (out,) = upsample(shape, mode=mode, align_corners=align_corners, size=size).run_numpy(x)
    np.testing.assert_allclose(out, reference_resize(x, *size, mode, align_corners), rtol=1e-5, atol=1e-5)


def test_recompute_scale_factor_samples_with_the_size_ratio():
    # 9 * 1.5 -> 13 rows: recomputed, row o samples at (o + .5) * 9/13 - .5, not (o + .5) / 1.5 - .5
    shape = (1, 2, 9, 9)
    x = RNG.standard_normal(shape).astype(np.float32)
    params = dict(mode="bilinear", align_corners=False, scale_factor=(1.5, 1.5))
    given = upsample(shape, "F.interpolate", recompute_scale_factor=False, **params).run_numpy(x)[0]
    recomputed = upsample(shape, "F.interpolate", recompute_scale_factor=True, **params).run_numpy(x)[0]
    np.testing.assert_allclose(given, reference_resize(x, 13, 13, "bilinear", scales=(1.5, 1.5)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(recomputed, reference_resize(x, 13, 13, "bilinear"), rtol=1e-5, atol=1e-6)
    assert not np.allclose(given, recomputed)


def test_worked_examples():
    x = np.array([[[[0.0, 3.0]]]], dtype=np.float32)
    corners = upsample(x.shape, mode="bilinear", align_corners=True, size=(1, 4)).run_numpy(x)[0]
    np.testing.assert_allclose(corners[0, 0, 0], [0, 1, 2, 3])
    # without align_corners the outputs sample at -.25, .25, .75, 1.25: both ends clamp to the edge pixels
    centres = upsample(x.shape, mode="bilinear", align_corners=False, size=(1, 4)).run_numpy(x)[0]
    np.testing.assert_allclose(centres[0, 0, 0], [0, 0.75, 2.25, 3])
    x = np.array([[[[1, 2], [3, 4]]]], dtype=np.float32)
    nearest = upsample(x.shape, mode="nearest", scale_factor=(2.0, 2.0)).run_numpy(x)[0]
    np.testing.assert_array_equal(nearest[0, 0], [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]])


def test_helper_types_imply_their_mode():
    x = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    (out,) = upsample(x.shape, "F.upsample_bilinear", size=(5, 7)).run_numpy(x)
    np.testing.assert_allclose(out, reference_resize(x, 5, 7, "bilinear", align_corners=True), rtol=1e-5,
                               atol=1e-6)
    (out,) = upsample(x.shape, "F.upsample_nearest", scale_factor=(2.0, 2.0)).run_numpy(x)
    np.testing.assert_array_equal(out, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))


def test_output_shapes_follow_the_input_not_the_recorded_shape():
    layer = upsample((1, 3, 8, 8), mode="nearest", scale_factor=(1.5, 2.0))
    assert layer.output_shapes([(4, 3, 7, 5)]) == [(4, 3, 10, 10)]
    layer = upsample((1, 3, 8, 8), mode="bilinear", align_corners=False, size=(6, 9))
    assert layer.output_shapes([(2, 5, 3, 3)]) == [(2, 5, 6, 9)]
    with pytest.raises(ShapeError):
        layer.output_shapes([(5, 3, 3)])
    layer = upsample((1, 3, 8, 8), mode="nearest", scale_factor=(0.5, 0.5))
    with pytest.raises(ShapeError):
        layer.output_shapes([(1, 3, 1, 8)])


@pytest.mark.parametrize("params, message", [
    (dict(mode="area", scale_factor=(2.0, 2.0)), "mode"),
    (dict(mode="trilinear", scale_factor=(2.0, 2.0)), "mode"),
    (dict(mode="nearest", align_corners=True, scale_factor=(2.0, 2.0)), "align_corners"),
    (dict(mode="bilinear", size=(4, 4), scale_factor=(2.0, 2.0)), "size"),
    (dict(mode="bilinear"), "size"),
    (dict(mode="nearest", scale_factor=(2.0,)), "scale_factor"),  # a 1-D resize
    (dict(mode="nearest", scale_factor=(2.0, 0.0)), "positive"),
    (dict(mode="bilinear", scale_factor=(0.5, 0.5), antialias=True), "antialias"),
])
def test_rejects_bad_parameters(params, message):
    with pytest.raises(LayerError, match=message):
        upsample((1, 1, 4, 4), "F.interpolate", **params)
