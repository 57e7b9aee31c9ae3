"""nn.BatchNorm2d against the unfolded formula (x - mean) / sqrt(var + eps) * weight + bias, in float64."""

import numpy as np
import pytest

import kuiper.layers.batchnorm2d  # noqa: F401  (registers nn.BatchNorm2d)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer


def batchnorm_reference(x, mean, var, eps, weight=None, bias=None):
    def per_channel(v):
        return v.astype(np.float64).reshape(-1, 1, 1)

    y = (x.astype(np.float64) - per_channel(mean)) / np.sqrt(per_channel(var) + eps)
    return y if weight is None else y * per_channel(weight) + per_channel(bias)


def statistics(rng, c, affine):
    stats = {"running_mean": rng.standard_normal(c), "running_var": rng.uniform(0.1, 3.0, c)}
    if affine:
        stats.update(weight=rng.standard_normal(c), bias=rng.standard_normal(c))
    return {k: v.astype(np.float32) for k, v in stats.items()}


def make_bn(attrs, c=5, eps=1e-5, affine=True, input_shape=(1, 5, 1, 1), backend="reference"):
    return make_layer("nn.BatchNorm2d", backend=backend, params=dict(num_features=c, eps=eps, affine=affine),
                      attrs=attrs, input_shapes=[input_shape])


@pytest.mark.parametrize("shape", [(1, 5, 7, 5), (3, 5, 1, 1), (2, 5, 9, 11)])
@pytest.mark.parametrize("affine", [True, False])
def test_matches_reference(shape, affine):
    rng = np.random.default_rng(0)
    attrs = statistics(rng, 5, affine)
    layer = make_bn(attrs, eps=1e-3, affine=affine, input_shape=shape)
    x = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    expected = batchnorm_reference(x, eps=1e-3, mean=attrs["running_mean"], var=attrs["running_var"],
                                   weight=attrs.get("weight"), bias=attrs.get("bias"))
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected, rtol=1e-4,
                               atol=1e-5 * max(1.0, np.abs(expected).max()))


def test_other_shapes_than_recorded():
    layer = make_bn(statistics(np.random.default_rng(1), 5, True), input_shape=(1, 5, 7, 5))
    assert layer.output_shapes([(4, 5, 20, 30)]) == [(4, 5, 20, 30)]


@pytest.mark.parametrize("shape", [(1, 4, 7, 5), (5, 7, 5), (1, 5)])
def test_wrong_shape(shape):
    layer = make_bn(statistics(np.random.default_rng(2), 5, True))
    with pytest.raises(ShapeError, match="expects input"):
        layer.output_shapes([shape])


def test_bad_weights():
    good = statistics(np.random.default_rng(3), 5, True)
    for key, message in [("running_var", "missing weight '@running_var'"), ("bias", "missing weight '@bias'")]:
        with pytest.raises(LayerError, match=message):
            make_bn({k: v for k, v in good.items() if k != key})
    with pytest.raises(LayerError, match="expected \\(5,\\)"):
        make_bn({**good, "weight": np.ones(4, np.float32)})
    with pytest.raises(LayerError, match="running_var"):
        make_bn({**good, "running_var": -np.ones(5, np.float32)})


@pytest.mark.parametrize("shape", [(3, 5), (2, 5, 9), (1, 5, 1), (0, 5)])
def test_batchnorm1d_normalizes_each_channel(shape):
    # LeViT and RepViT as pnnx writes them: `nn.BatchNorm1d` on (N, C) after a linear layer, or on (N, C, L)
    from conftest import assert_every_path_matches_reference

    rng = np.random.default_rng(4)
    attrs = statistics(rng, 5, True)
    params = dict(num_features=5, eps=1e-3, affine=True)
    x = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    layer = make_layer("nn.BatchNorm1d", params=params, attrs=attrs, input_shapes=[shape])
    expected = batchnorm_reference(x.reshape(*shape, *(1,) * (4 - len(shape))), eps=1e-3, mean=attrs["running_mean"],
                                   var=attrs["running_var"], weight=attrs["weight"], bias=attrs["bias"])
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected.reshape(shape), rtol=1e-4, atol=1e-5 * 10)
    assert_every_path_matches_reference("nn.BatchNorm1d", x, params=params, attrs=attrs, rtol=1e-6)
    with pytest.raises(ShapeError, match=r"expects input \(N, 5\) or \(N, 5, L\), got \(2, 5, 3, 3\)"):
        layer.output_shapes([(2, 5, 3, 3)])
