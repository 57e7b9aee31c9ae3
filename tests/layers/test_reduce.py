"""torch.sum / torch.mean against explicit sums over every index of the reduced dimensions."""

import numpy as np
import pytest

import kuiper.layers.reduce  # noqa: F401  (registers the layers)
from kuiper.core.errors import ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(4)


def reference_reduce(x, dims, keepdim, kind):
    """Accumulate every element into the output cell its kept coordinates name (float64)."""
    reduced = set(range(x.ndim)) if dims is None else {d % x.ndim for d in dims}
    kept_shape = tuple(1 if a in reduced else n for a, n in enumerate(x.shape))
    total = np.zeros(kept_shape)
    for index in np.ndindex(x.shape):
        total[tuple(0 if a in reduced else i for a, i in enumerate(index))] += x[index]
    if kind == "mean":
        total /= np.prod([x.shape[a] for a in reduced])
    return total if keepdim else total.reshape([n for a, n in enumerate(x.shape) if a not in reduced])


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dims", [None, (1,), (-1,), (0, 2), (1, -1), (0, 1, 2, 3)])
@pytest.mark.parametrize("kind", ["sum", "mean"])
def test_matches_reference(kind, dims, keepdim):
    shape = (3, 4, 5, 2)
    x = RNG.standard_normal(shape).astype(np.float32)
    params = {"keepdim": keepdim} if dims is None else {"dim": list(dims), "keepdim": keepdim}
    (out,) = make_layer(f"torch.{kind}", params=params, input_shapes=[shape]).run_numpy(x)
    expected = reference_reduce(x, dims, keepdim, kind)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dims, keepdim", [(None, False), ((1,), False), ((-1, 1), True), ((0, 2, 3), False)])
@pytest.mark.parametrize("kind, pick", [("amax", max), ("amin", min)])
def test_amax_and_amin_pick_the_extreme_of_the_reduced_elements(kind, pick, dims, keepdim):
    x = RNG.standard_normal((3, 4, 5, 2)).astype(np.float32)
    params = {"keepdim": keepdim} if dims is None else {"dim": list(dims), "keepdim": keepdim}
    (out,) = make_layer(f"torch.{kind}", params=params, input_shapes=[x.shape]).run_numpy(x)
    reduced = set(range(4)) if dims is None else {d % 4 for d in dims}
    cells = {}
    for index in np.ndindex(x.shape):
        key = tuple(i for a, i in enumerate(index) if a not in reduced)
        cells[key] = pick(cells.get(key, x[index]), x[index])
    expected = np.array([cells[key] for key in sorted(cells)], np.float32).reshape(
        [1 if a in reduced else n for a, n in enumerate(x.shape)] if keepdim else
        [n for a, n in enumerate(x.shape) if a not in reduced])
    np.testing.assert_array_equal(out, expected)


def test_dim_as_a_single_int_and_defaults():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    (out,) = make_layer("torch.mean", params=dict(dim=-2), input_shapes=[x.shape]).run_numpy(x)
    np.testing.assert_allclose(out, reference_reduce(x, (-2,), False, "mean"), rtol=1e-5)
    # no dim (or pnnx's dim=None) reduces everything to a 0-d result
    for params in ({}, dict(dim=None, keepdim=False)):
        (out,) = make_layer("torch.sum", params=params, input_shapes=[x.shape]).run_numpy(x)
        assert out.shape == ()
        np.testing.assert_allclose(out, x.astype(np.float64).sum(), rtol=1e-5)


def test_integer_sum_is_int64():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (out,) = make_layer("torch.sum", params=dict(dim=[1]), input_shapes=[x.shape]).run_numpy(x)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [6, 22, 38])


def test_output_shapes_follow_the_input_and_check_dims():
    layer = make_layer("torch.mean", params=dict(dim=[2, 3], keepdim=True), input_shapes=[(1, 3, 8, 8)])
    assert layer.output_shapes([(5, 7, 2, 3)]) == [(5, 7, 1, 1)]
    with pytest.raises(ShapeError, match="out of range"):
        layer.output_shapes([(5, 7, 2)])
    layer = make_layer("torch.sum", params=dict(dim=[1, -2]), input_shapes=[(1, 3, 8)])
    with pytest.raises(ShapeError, match="twice"):
        layer.output_shapes([(1, 3, 8)])
