"""Checkpoint of lesson 17: exercises/lesson_17.py's nearest and bilinear upsampling, held to kuiper's
nn.Upsample layer, and unet_tiny run with them in place of its Upsample layers against PyTorch."""

import numpy as np
import pytest

import kuiper
from kuiper.runtime.backends import make_layer
from lesson_tools import exercise, model_case

ex = exercise(17)


def layer(mode, shape, scale, align_corners=False):
    params = dict(mode=mode, scale_factor=[float(s) for s in scale])
    if mode == "bilinear":
        params["align_corners"] = align_corners
    return make_layer("nn.Upsample", input_shapes=(shape,), params=params)


@pytest.mark.parametrize("scale", [(2, 2), (3, 1), (2, 3)], ids=str)
def test_nearest_is_kuipers(scale):
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(ex.upsample_nearest(x, scale), layer("nearest", x.shape, scale).run_numpy(x)[0])


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("scale", [(2, 2), (3, 2), (1.5, 2.0), (2, 1)], ids=str)
def test_bilinear_is_kuipers(scale, align_corners):
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 6)).astype(np.float32)
    expected = layer("bilinear", x.shape, scale, align_corners).run_numpy(x)[0]
    got = ex.upsample_bilinear(x, scale, align_corners)
    assert np.shape(got) == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_bilinear_of_two_pixels_by_hand():
    x = np.array([[[[1.0, 3.0]]]], np.float32)
    np.testing.assert_allclose(ex.upsample_bilinear(x, (1, 2), False)[0, 0, 0], [1.0, 1.5, 2.5, 3.0])
    np.testing.assert_allclose(ex.upsample_bilinear(x, (1, 2), True)[0, 0, 0], [1.0, 5 / 3, 7 / 3, 3.0], rtol=1e-6)


def test_unet_tiny_with_your_upsampling_matches_pytorch():
    param, inputs, expected = model_case("unet_tiny", "b2")
    graph = kuiper.load(param, backend="reference")
    replaced = 0
    for op in graph.operators:
        if op.type == "nn.Upsample":
            mode = op.params["mode"].value
            scale = op.params["scale_factor"].value
            align = op.params["align_corners"].value if "align_corners" in op.params else False

            def forward(ins, outs, mode=mode, scale=scale, align=align):
                outs[0][...] = (ex.upsample_bilinear(ins[0], scale, align) if mode == "bilinear"
                                else ex.upsample_nearest(ins[0], scale))

            op.layer.forward_numpy = forward
            replaced += 1
    assert replaced
    for got, want in zip(graph.forward(*inputs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
