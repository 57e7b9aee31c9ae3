"""The blocked activations (kuiper/cpu/elementwise.py) against the reference ones, for every registered
activation: made by registry.fast_class, as the numpy backend gets them."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference
from cpu_tools import assert_views_match_reference, running_on

import kuiper.layers  # noqa: F401  (registers the reference layers)
from kuiper.cpu.elementwise import BLOCK, BlockedElementwise
from kuiper.cpu.registry import fast_class
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import layer_class, register, registered_types, unregister
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(11)

ACTIVATIONS = [t for t in registered_types() if issubclass(layer_class(t), ElementwiseLayer)]
#: parameters a type cannot do without; the others run with their defaults
PARAMS = {"torch.clamp": {"min": -1.0, "max": 2.0}}

SMALL = RNG.standard_normal((3, 5, 7)).astype(np.float32) * 4
# 1x64x112x112 (ResNet's first activation): 12.25 blocks, enough for 3 threads, the last block partial
LARGE = RNG.standard_normal((1, 64, 112, 112)).astype(np.float32) * 4
assert SMALL.size < BLOCK < LARGE.size // 12


def with_special_values(x):
    """x with NaN, infinities, signed zeros and huge values, some at block edges (each layer defines its own
    results there: ReLU(NaN) is NaN, GELU(-inf) is NaN). Where a result is infinite, conftest's tolerance
    becomes infinite too: these cases check where NaN and inf come out, the plain ones the finite values."""
    x = x.copy()
    flat = x.reshape(-1)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 89.0, -89.0], np.float32)
    edges = [i for start in range(0, flat.size, BLOCK) for i in (start - 1, start) if i >= 0]
    places = np.concatenate([edges, RNG.choice(flat.size, min(flat.size, 50), replace=False)])
    flat[places] = special[np.arange(len(places)) % len(special)]
    return x


def test_every_activation_is_covered_and_gets_one_cached_fast_class():
    assert {"nn.ReLU", "nn.GELU", "nn.Sigmoid", "torch.clamp"} <= set(ACTIVATIONS)
    for t in ACTIVATIONS:
        cls = fast_class(t)
        assert issubclass(cls, BlockedElementwise) and issubclass(cls, layer_class(t)) and fast_class(t) is cls
        assert cls.__name__ == f"Fast{layer_class(t).__name__}"


def test_a_type_registered_anew_gets_a_fast_class_of_its_new_layer():
    class Double(ElementwiseLayer):
        def apply(self, x, out):
            np.multiply(x, 2, out=out)

    class Halve(Double):
        def apply(self, x, out):
            np.multiply(x, 0.5, out=out)

    try:
        register("test.Scale")(Double)
        assert issubclass(fast_class("test.Scale"), Double)
        unregister("test.Scale")
        register("test.Scale")(Halve)
        assert issubclass(fast_class("test.Scale"), Halve)
    finally:
        unregister("test.Scale")


def test_types_without_a_fast_forward_have_no_fast_class():
    assert fast_class("nn.Softmax") is None  # not element-wise
    assert fast_class("no.SuchType") is None


@pytest.mark.parametrize("x", [SMALL, LARGE, with_special_values(SMALL), with_special_values(LARGE)],
                         ids=["small", "large", "small-special", "large-special"])
@pytest.mark.parametrize("type", ACTIVATIONS)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow and inf - inf inside some formulas
def test_fast_activation_matches_reference(type, x):
    assert assert_every_path_matches_reference(type, x, params=PARAMS.get(type, {})) == ["forward_numpy"]


@pytest.mark.parametrize("type", ["nn.Sigmoid", "nn.ReLU", "nn.Hardswish"])  # the blocked path, clip, a work block
@pytest.mark.parametrize("layout", ["strided input", "strided output", "both"])
def test_strided_arrays_match_reference(type, layout):
    x = LARGE[..., ::2] if layout != "strided output" else LARGE[..., :56].copy()
    out = np.empty(x.shape + (2,), np.float32)[..., 0] if layout != "strided input" else np.empty_like(x)
    assert_views_match_reference(type, [x], out)


@pytest.mark.parametrize("count", [1, 3])
def test_in_place_on_the_input_matches_reference(count):
    """A layer marked in_place may be given its input as its output: the blocks then overwrite it."""
    x = with_special_values(LARGE)
    expected = np.maximum(x, 0)
    assert fast_class("nn.ReLU").in_place
    with running_on(count):
        make_layer("nn.ReLU", backend="numpy", input_shapes=[x.shape]).forward_numpy([x], [x])
    np.testing.assert_array_equal(x, expected)
