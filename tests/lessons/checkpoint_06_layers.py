"""Checkpoint of lesson 6: the Softplus layer of exercises/lesson_06.py, held to float64 formulas (numpy's
logaddexp), to the build-time checks of the Layer interface, and run inside a graph on both CPU backends."""

import numpy as np
import pytest

import kuiper
from kuiper.core.errors import LayerError
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.runtime.backends import make_layer
from lesson_tools import exercise

ex = exercise(6)


def softplus64(x, beta=1.0):
    return np.logaddexp(0.0, beta * x.astype(np.float64)) / beta


def test_softplus_matches_float64_without_overflow():
    x = np.linspace(-100, 100, 101, dtype=np.float32)
    layer = make_layer("course.Softplus", input_shapes=(x.shape,))
    assert type(layer) is ex.Softplus and isinstance(layer, ElementwiseLayer)   # registered, element-wise
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        (y,) = layer.run_numpy(x)
    assert y.dtype == np.float32 and np.isfinite(y).all()
    np.testing.assert_allclose(y, softplus64(x), rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("beta", [2, 0.5, 3.0])
def test_beta_is_read_and_an_int_works(beta):
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32) * 30
    layer = make_layer("course.Softplus", params={"beta": beta}, input_shapes=(x.shape,))  # would refuse an unread beta
    with np.errstate(over="raise", invalid="raise"):
        np.testing.assert_allclose(layer.run_numpy(x)[0], softplus64(x, beta), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beta", [0.0, -1.0, 0])
def test_beta_must_be_positive(beta):
    with pytest.raises(LayerError, match="course.Softplus operator 'op'"):
        make_layer("course.Softplus", params={"beta": beta}, input_shapes=((2,),))


@pytest.mark.parametrize("backend", ["reference", "numpy"])
def test_softplus_runs_in_a_graph(tmp_path, backend):
    (tmp_path / "soft.pnnx.param").write_text("""7767517
4 3
pnnx.Input       in0   0 1 x #x=(2,3,5)f32
course.Softplus  soft  1 1 x y beta=2.0 #x=(2,3,5)f32 #y=(2,3,5)f32
nn.ReLU          relu  1 1 y z #y=(2,3,5)f32 #z=(2,3,5)f32
pnnx.Output      out0  1 0 z
""")
    graph = kuiper.load(tmp_path / "soft.pnnx.param", backend=backend)
    x = np.linspace(-60, 60, 30, dtype=np.float32).reshape(2, 3, 5)
    (z,) = graph.forward(x)
    np.testing.assert_allclose(z, softplus64(x, 2.0), rtol=1e-6, atol=1e-30)
