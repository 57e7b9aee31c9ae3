"""Channel shuffle and pixel (un)shuffle against their element formulas, written as index arithmetic:

- channel shuffle with g groups of m = C / g: output channel k * g + j is input channel j * m + k;
- pixel shuffle by r: out[..., c, h * r + i, w * r + j] = x[..., c * r * r + i * r + j, h, w], and pixel
  unshuffle the other way round.
"""

import numpy as np
import pytest

import kuiper.layers.shuffle  # noqa: F401  (registers the layers)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.layers.registry import is_supported
from kuiper.runtime.backends import make_layer
from test_slice import rand, refused


def run(type, params, x):
    return make_layer(type, params=params, input_shapes=[x.shape]).run_numpy(x)[0]


@pytest.mark.parametrize("type", ["nn.ChannelShuffle", "F.channel_shuffle", "F.pixel_shuffle", "nn.PixelShuffle",
                                  "F.pixel_unshuffle", "nn.PixelUnshuffle"])
def test_every_spelling_is_registered(type):
    assert is_supported(type)


@pytest.mark.parametrize("shape, groups", [((2, 12, 5, 7), 3), ((1, 116, 7, 5), 2), ((3, 6, 4), 6),
                                           ((2, 6, 2, 3, 2), 2), ((2, 5, 3, 3), 1)])
@pytest.mark.parametrize("type", ["nn.ChannelShuffle", "F.channel_shuffle"])
def test_channel_shuffle(type, shape, groups):
    x = rand(*shape)
    m = shape[1] // groups
    order = [j * m + k for k in range(m) for j in range(groups)]  # output channel k * groups + j
    np.testing.assert_array_equal(run(type, dict(groups=groups), x), x[:, order])
    assert_every_path_matches_reference(type, x, rtol=0, params=dict(groups=groups))


def pixel_shuffled(x, r):
    *batch, channels, h, w = x.shape
    out = np.empty((*batch, channels // (r * r), h * r, w * r), x.dtype)
    for c in range(channels // (r * r)):
        for i in range(r):
            for j in range(r):
                out[..., c, i::r, j::r] = x[..., c * r * r + i * r + j, :, :]
    return out


@pytest.mark.parametrize("shape, r", [((2, 12, 5, 7), 2), ((2, 18, 5, 7), 3), ((3, 2, 8, 2, 3), 2), ((4, 3, 3), 1),
                                      ((8, 2, 2), 2)])
def test_pixel_shuffle(shape, r):
    x = rand(*shape)
    np.testing.assert_array_equal(run("F.pixel_shuffle", dict(upscale_factor=r), x), pixel_shuffled(x, r))
    assert_every_path_matches_reference("F.pixel_shuffle", x, rtol=0, params=dict(upscale_factor=r))


@pytest.mark.parametrize("shape, r", [((2, 3, 6, 4), 2), ((1, 2, 9, 6), 3), ((2, 2, 3, 4, 6), 2)])
def test_pixel_unshuffle_undoes_pixel_shuffle(shape, r):
    x = rand(*shape)
    out = run("F.pixel_unshuffle", dict(downscale_factor=r), x)
    np.testing.assert_array_equal(pixel_shuffled(out, r), x)
    assert_every_path_matches_reference("F.pixel_unshuffle", x, rtol=0, params=dict(downscale_factor=r))


@pytest.mark.parametrize("type, params, shape, error, match", [
    ("nn.ChannelShuffle", dict(groups=4), (2, 6, 5, 7), ShapeError, "groups=4 does not divide the 6 channels"),
    ("nn.ChannelShuffle", dict(groups=0), (2, 6, 5, 7), LayerError, "groups=0 must be >= 1"),
    ("F.channel_shuffle", dict(groups=2), (2, 6), ShapeError, "input of 3 dims or more, got (2, 6)"),
    ("F.pixel_shuffle", dict(upscale_factor=2), (2, 6, 5, 7), ShapeError, "channels divisible by 4, got 6"),
    ("F.pixel_shuffle", dict(upscale_factor=-2), (2, 8, 5, 7), LayerError, "upscale_factor=-2 must be >= 1"),
    ("F.pixel_shuffle", dict(upscale_factor=2), (8, 2), ShapeError, "3 dims or more"),
    ("F.pixel_unshuffle", dict(downscale_factor=2), (2, 5, 4, 5), ShapeError,
     "downscale_factor=2 must divide the height and width, got 4 x 5"),
    ("F.pixel_unshuffle", dict(downscale_factor=0), (2, 5, 4, 4), LayerError, "downscale_factor=0 must be >= 1"),
])
def test_shuffles_refuse(type, params, shape, error, match):
    refused(error, type, params, shapes=(shape,), match=match)
