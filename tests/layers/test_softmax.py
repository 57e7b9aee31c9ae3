"""Softmax against the definition exp(x_i) / sum_j exp(x_j), evaluated in float64 one slice at a time."""

import numpy as np
import pytest

import kuiper.layers.softmax  # noqa: F401  (registers the layers)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(3)


def reference_softmax(x, dim):
    x = np.moveaxis(x.astype(np.float64), dim, -1)
    out = np.empty_like(x)
    for index in np.ndindex(x.shape[:-1]):
        e = np.exp(x[index])
        out[index] = e / e.sum()
    return np.moveaxis(out, -1, dim)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
@pytest.mark.parametrize("shape", [(1, 5, 7), (3, 4, 6)])
@pytest.mark.parametrize("type", ["nn.Softmax", "F.softmax"])
def test_matches_the_definition(type, shape, dim):
    x = RNG.standard_normal(shape).astype(np.float32) * 4
    (out,) = make_layer(type, params=dict(dim=dim), input_shapes=[shape]).run_numpy(x)
    np.testing.assert_allclose(out, reference_softmax(x, dim), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=dim), 1, rtol=1e-5)


def test_large_logits_do_not_overflow():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], dtype=np.float32)
    (out,) = make_layer("F.softmax", params=dict(dim=1), input_shapes=[x.shape]).run_numpy(x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, reference_softmax(x - x.max(axis=1, keepdims=True), 1), rtol=1e-6)


def test_output_shapes_follow_the_input_and_check_dim():
    layer = make_layer("nn.Softmax", params=dict(dim=-1), input_shapes=[(1, 10)])
    assert layer.output_shapes([(4, 3, 7)]) == [(4, 3, 7)]
    layer = make_layer("nn.Softmax", params=dict(dim=2), input_shapes=[(1, 3, 10)])
    with pytest.raises(ShapeError, match="dim"):
        layer.output_shapes([(4, 10)])


def test_dim_must_be_an_int():
    with pytest.raises(LayerError, match="dim"):
        make_layer("F.softmax", params=dict(dim=None), input_shapes=[(1, 10)])
