"""The claims of lesson 6: the Layer interface, the registry and the fast layers' registry, ReLU and a stable
Sigmoid, and a layer of our own."""

import ast
import re

import numpy as np
import pytest

import kuiper
from kuiper import LayerError, UnsupportedOperatorError
from kuiper.cpu import registry as fast_registry
from kuiper.layers import registry
from kuiper.layers.base import Layer
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.runtime.backends import make_layer
from lesson_tools import ROOT, check_shell_commands, notes_text


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


def test_the_notes_name_every_public_member_of_layer():
    """Read kuiper/layers/base.py's class Layer, as written, and find each public name in the lesson's table."""
    tree = ast.parse((ROOT / "kuiper" / "layers" / "base.py").read_text())
    layer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Layer")
    members = set()
    for node in layer.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            members.add(node.target.id)
        elif isinstance(node, ast.Assign):
            members.update(target.id for target in node.targets)
    members = {name for name in members if not name.startswith("_") or name == "__init__"}
    assert {"num_inputs", "variants", "output_shapes", "forward_numpy", "run_numpy"} <= members
    table = notes_text(6).split("### Every member of `Layer`", 1)[1].split("\n\n", 3)[2]
    named = set(re.findall(r"`(\w+)", table))
    assert members <= named, f"not in the notes' table: {sorted(members - named)}"


@pytest.mark.parametrize("kind, options, x", [
    ("nn.ReLU", {}, np.linspace(-3, 3, 70000, dtype=np.float32).reshape(7, 10000)),
    ("nn.Sigmoid", {}, np.linspace(-90, 90, 70000, dtype=np.float32).reshape(7, 10000)),
    ("nn.Linear", dict(params=dict(in_features=6, out_features=5, bias=True),
                       attrs=dict(weight=np.arange(30, dtype=np.float32).reshape(5, 6) / 30,
                                  bias=np.arange(5, dtype=np.float32))),
     np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)),
])
def test_fast_layers_subclass_the_reference_and_agree(kind, options, x):
    fast_class, reference_class = fast_registry.fast_class(kind), registry.layer_class(kind)
    assert fast_class is not reference_class and issubclass(fast_class, reference_class)
    fast = make_layer(kind, backend="numpy", input_shapes=(x.shape,), **options)
    reference = make_layer(kind, input_shapes=(x.shape,), **options)
    assert isinstance(fast, fast_class) and type(reference) is reference_class
    np.testing.assert_allclose(fast.run_numpy(x)[0], reference.run_numpy(x)[0], rtol=1e-6, atol=1e-6)


def test_data_movement_has_no_fast_class():
    assert fast_registry.fast_class("torch.flatten") is None and fast_registry.fast_class("torch.cat") is None
    assert type(make_layer("torch.flatten", backend="numpy", params=dict(start_dim=1, end_dim=-1),
                           input_shapes=((2, 3, 4),))) is registry.layer_class("torch.flatten")


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
    for backend, kind in (("numpy", "FastSoftsign"), ("reference", "Softsign")):
        graph = kuiper.load(path, backend=backend)
        assert type(graph.operators[1].layer).__name__ == kind  # an activation gets a blocked fast subclass
        (y,) = graph.forward(x)
        np.testing.assert_allclose(y, x / (1 + np.abs(x)), rtol=1e-6)


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(6, capsys)
