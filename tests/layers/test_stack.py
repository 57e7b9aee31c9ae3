"""torch.stack against an output assembled element by element: output[..., i, ...] is input i."""

import numpy as np
import pytest

import kuiper.layers.stack  # noqa: F401  (registers the layer)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import ShapeError
from kuiper.runtime.backends import make_layer
from test_slice import SHAPE, rand, refused


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("dim", [0, 1, 2, 4, -1, -3, -5])
def test_stack(dim, count):
    xs = [rand(*SHAPE) for _ in range(count)]
    (out,) = make_layer("torch.stack", params=dict(dim=dim), input_shapes=[SHAPE] * count).run_numpy(*xs)
    axis = dim % (len(SHAPE) + 1)
    assert out.shape == SHAPE[:axis] + (count,) + SHAPE[axis:]
    for index in np.ndindex(out.shape):
        rest = index[:axis] + index[axis + 1:]
        assert out[index] == xs[index[axis]][rest]
    assert_every_path_matches_reference("torch.stack", *xs, rtol=0, params=dict(dim=dim))


def test_stack_of_int64():
    xs = [rand(2, 3, 4, dtype=np.int64) for _ in range(2)]
    assert_every_path_matches_reference("torch.stack", *xs, rtol=0, params=dict(dim=2))


@pytest.mark.parametrize("shapes, dim, match", [
    ((SHAPE, (2, 6, 5, 6)), 0, "stacks inputs of one shape"),
    ((SHAPE, SHAPE), 5, "dim 5 is out of range [-5, 4]"),
    ((SHAPE, SHAPE), -6, "dim -6 is out of range"),
])
def test_stack_refuses(shapes, dim, match):
    refused(ShapeError, "torch.stack", dict(dim=dim), shapes=shapes, match=match)
