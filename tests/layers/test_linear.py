"""nn.Linear against a per-output-feature sum in float64, on inputs of rank 1 to 4."""

import numpy as np
import pytest

import kuiper.layers.linear  # noqa: F401  (registers nn.Linear)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer


def linear_reference(x, weight, bias):
    """out[..., o] = sum_k x[..., k] * weight[o, k] + bias[o]."""
    x, weight = x.astype(np.float64), weight.astype(np.float64)
    out = np.stack([(x * weight[o]).sum(axis=-1) for o in range(weight.shape[0])], axis=-1)
    return out if bias is None else out + bias


def make_linear(rng, in_features, out_features, bias=True, input_shape=(1, 1), backend="reference"):
    weight = rng.standard_normal((out_features, in_features)).astype(np.float32)
    b = rng.standard_normal(out_features).astype(np.float32) if bias else None
    attrs = {"weight": weight} if b is None else {"weight": weight, "bias": b}
    params = dict(in_features=in_features, out_features=out_features, bias=bias)
    return make_layer("nn.Linear", backend=backend, params=params, attrs=attrs, input_shapes=[input_shape]), weight, b


@pytest.mark.parametrize("shape", [(7,), (1, 7), (3, 7), (3, 5, 7), (2, 3, 1, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_reference(shape, bias):
    rng = np.random.default_rng(0)
    layer, weight, b = make_linear(rng, 7, 5, bias, input_shape=shape)
    x = rng.standard_normal(shape).astype(np.float32)
    expected = linear_reference(x, weight, b)
    actual = layer.run_numpy(x)[0]
    assert actual.shape == shape[:-1] + (5,)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(expected).max()))


def test_other_shapes_than_recorded():
    layer, _, _ = make_linear(np.random.default_rng(1), 7, 5, input_shape=(1, 7))
    assert layer.output_shapes([(8, 3, 7)]) == [(8, 3, 5)]


@pytest.mark.parametrize("shape", [(1, 5), (7, 1), ()])
def test_wrong_last_axis(shape):
    layer, _, _ = make_linear(np.random.default_rng(2), 7, 5, input_shape=(1, 7))
    with pytest.raises(ShapeError, match="expects input"):
        layer.output_shapes([shape])


@pytest.mark.parametrize("attrs, message", [
    ({"weight": np.zeros((7, 5), np.float32), "bias": np.zeros(5, np.float32)}, "expected \\(5, 7\\)"),
    ({"weight": np.zeros((5, 7), np.float32), "bias": np.zeros(7, np.float32)}, "@bias"),
    ({"weight": np.zeros((5, 7), np.float32)}, "missing weight '@bias'"),
    ({"bias": np.zeros(5, np.float32)}, "missing weight '@weight'"),
])
def test_bad_weights(attrs, message):
    with pytest.raises(LayerError, match=message):
        make_layer("nn.Linear", params=dict(in_features=7, out_features=5, bias=True), attrs=attrs,
                   input_shapes=[(1, 7)])


def test_bad_features():
    with pytest.raises(LayerError, match="in_features"):
        make_layer("nn.Linear", params=dict(in_features=0, out_features=5, bias=False),
                   attrs={"weight": np.zeros((5, 0), np.float32)}, input_shapes=[(1, 0)])
