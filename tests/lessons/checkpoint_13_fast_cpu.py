"""Checkpoint of lesson 13: exercises/lesson_13.py's F(2, 3) matrices, checked against the definition of the
filter (numpy's correlate), and its Winograd convolution, held to kuiper's reference Conv2d with F(2x2) and
F(4x4)."""

import numpy as np
import pytest

from kuiper.runtime.backends import make_layer
from kuiper.core.winograd import F2, F4
from lesson_tools import exercise

ex = exercise(13)


def test_f23_shapes():
    bt, g, at = (np.asarray(m, np.float64) for m in ex.f23())
    assert (bt.shape, g.shape, at.shape) == ((4, 4), (4, 3), (2, 4))      # four products for two outputs


def test_f23_computes_the_filter():
    bt, g, at = (np.asarray(m, np.float64) for m in ex.f23())
    rng = np.random.default_rng(0)
    for _ in range(50):
        d, w = rng.standard_normal(4), rng.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"), rtol=1e-12, atol=1e-12)


def test_f23_nests_into_two_dimensions():
    bt, g, at = (np.asarray(m, np.float64) for m in ex.f23())
    rng = np.random.default_rng(1)
    d, w = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
    direct = np.array([[np.sum(d[y:y + 3, x:x + 3] * w) for x in range(2)] for y in range(2)])
    np.testing.assert_allclose(at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T, direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f", [F2, F4], ids=["F2", "F4"])
@pytest.mark.parametrize("size", [(8, 8), (9, 7), (5, 13)], ids=str)
def test_winograd_conv3x3_is_the_reference_convolution(f, size):
    rng = np.random.default_rng(size[0])
    x = rng.standard_normal((1, 5, *size)).astype(np.float32)
    w = rng.standard_normal((3, 5, 3, 3)).astype(np.float32)
    layer = make_layer("nn.Conv2d", input_shapes=(x.shape,), attrs=dict(weight=w), params=dict(
        in_channels=5, out_channels=3, kernel_size=[3, 3], padding=[1, 1], bias=False))
    got = ex.winograd_conv3x3(x[0], w, f)
    assert np.shape(got) == (3, *size)
    np.testing.assert_allclose(got, layer.run_numpy(x)[0][0], rtol=1e-4, atol=1e-4)
