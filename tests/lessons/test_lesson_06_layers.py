"""Checkpoint of lesson 6: the Layer interface, the registry, ReLU and a stable Sigmoid, and a layer of our own."""

import numpy as np
import pytest

import kuiper
from kuiper import LayerError, UnsupportedOperatorError
from kuiper.layers import registry
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.runtime.operators import make_layer
from lesson_tools import check_shell_commands


def test_relu_matches_the_formula_and_writes_in_place():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    layer = make_layer("nn.ReLU", input_shapes=(x.shape,))
    out = np.full_like(x, np.nan)
    assert layer.output_shapes([x.shape]) == [x.shape]
    assert layer.forward_numpy([x], [out]) is None
    np.testing.assert_array_equal(out, np.where(x > 0, x, 0))
    assert registry.layer_class("F.relu") is type(layer)


def test_sigmoid_is_accurate_everywhere_without_overflow():
    x = np.concatenate([np.linspace(-100, 100, 2001), [-88.8, 88.8, 0.0]]).astype(np.float32)
    layer = make_layer("nn.Sigmoid", input_shapes=(x.shape,))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        (y,) = layer.run_numpy(x)
    reference = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    normal = reference > np.finfo(np.float32).tiny  # subnormal results carry only a few bits
    np.testing.assert_allclose(y[normal], reference[normal], rtol=2e-6)
    np.testing.assert_allclose(y[~normal], reference[~normal], atol=1e-44)
    assert np.all((y >= 0) & (y <= 1))
    assert y[x == -100][0] > 0  # the tiny true value survives, it is not flushed to 0


def test_registry_lookups_and_errors():
    assert registry.is_supported("nn.Sigmoid") and registry.is_supported("F.sigmoid")
    assert not registry.is_supported("lesson06.Nothing")
    with pytest.raises(UnsupportedOperatorError, match="'lesson06.Nothing' .*'op3'"):
        registry.layer_class("lesson06.Nothing", "op3")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("nn.ReLU")(type("Impostor", (ElementwiseLayer,), {}))


def test_build_time_checks_raise_layer_errors():
    with pytest.raises(LayerError, match="expects 1 input"):
        make_layer("nn.Sigmoid", input_shapes=((2,), (2,)))
    with pytest.raises(LayerError, match="nn.Conv2d operator 'op': missing parameter"):
        make_layer("nn.Conv2d", params={})


@pytest.fixture
def softsign():
    """A layer registered for this test only (the registry is shared by the whole test session)."""

    @registry.register("lesson06.Softsign")
    class Softsign(ElementwiseLayer):
        def apply(self, x, out):
            np.abs(x, out=out)
            out += 1.0
            np.divide(x, out, out=out)

    yield Softsign
    registry.unregister("lesson06.Softsign")


def test_a_new_layer_runs_alone_and_in_a_graph(softsign, tmp_path):
    x = np.linspace(-5, 5, 12, dtype=np.float32).reshape(3, 4)
    layer = make_layer("lesson06.Softsign", input_shapes=(x.shape,))
    assert isinstance(layer, softsign)
    np.testing.assert_allclose(layer.run_numpy(x)[0], x / (1 + np.abs(x)), rtol=1e-6)

    path = tmp_path / "soft.pnnx.param"
    path.write_text("7767517\n3 2\n"
                    "pnnx.Input in0 0 1 x #x=(3,4)f32\n"
                    "lesson06.Softsign soft 1 1 x y #x=(3,4)f32 #y=(3,4)f32\n"
                    "pnnx.Output out0 1 0 y\n")
    (y,) = kuiper.load(path).forward(x)
    np.testing.assert_allclose(y, x / (1 + np.abs(x)), rtol=1e-6)


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(6, capsys)
