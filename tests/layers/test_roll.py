"""torch.roll against the definition out[..., (i + shift) % n, ...] = x[..., i, ...], applied one dim at a time
with index arrays, and on OpenCL (2^k strided copies) against the reference."""

import numpy as np
import pytest

import kuiper.layers.roll  # noqa: F401  (registers the layer)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer
from test_slice import SHAPE, rand, refused


def rolled(x, shift, axis):
    """x rolled by `shift` along `axis`: output position j holds input position (j - shift) mod n."""
    n = x.shape[axis]
    return np.take(x, [(j - shift) % n for j in range(n)], axis=axis)


@pytest.mark.parametrize("shape, dims, shifts", [
    ((1, 8, 8, 6), (1, 2), (-3, -3)),     # swin's shifted windows, there and back
    ((1, 8, 8, 6), (1, 2), (3, 3)),
    (SHAPE, (0, 3), (1, -2)),
    (SHAPE, (1,), (2,)),
    (SHAPE, (1, 2, 3), (13, -9, 4)),      # shifts longer than the dim
    (SHAPE, (2,), (5,)),                  # a whole turn: nothing moves
    (SHAPE, (-1, -3), (3, 0)),
    (SHAPE, (1, 1), (2, 3)),              # a dim named twice rolls by the sum
    ((2, 3, 2, 3, 2, 3, 2), (0, 1, 2, 3, 4, 5, 6), (1, 1, 1, 1, 1, 1, 1)),  # 128 block copies
])
def test_roll_along_dims(shape, dims, shifts):
    x = rand(*shape)
    expected = x
    for dim, shift in zip(dims, shifts):
        expected = rolled(expected, shift, dim)
    params = dict(dims=dims, shifts=shifts)
    np.testing.assert_array_equal(make_layer("torch.roll", params=params, input_shapes=[shape]).run_numpy(x)[0],
                                  expected)
    assert_every_path_matches_reference("torch.roll", x, rtol=0, params=params)


@pytest.mark.parametrize("shift", [3, -50, 0, 210])
def test_roll_without_dims_rolls_the_flat_tensor(shift):
    x = rand(*SHAPE)
    params = dict(dims=None, shifts=(shift,))
    (out,) = make_layer("torch.roll", params=params, input_shapes=[SHAPE]).run_numpy(x)
    np.testing.assert_array_equal(out.reshape(-1), rolled(x.reshape(-1), shift, 0))
    assert_every_path_matches_reference("torch.roll", x, rtol=0, params=params)


def test_roll_of_int64():
    assert_every_path_matches_reference("torch.roll", rand(3, 4, 5, dtype=np.int64), rtol=0,
                                        params=dict(dims=(0, 2), shifts=(1, -2)))


@pytest.mark.parametrize("params, shapes, error, match", [
    (dict(dims=(1, 2), shifts=(3,)), (SHAPE,), LayerError, "must have one shift per dim"),
    (dict(dims=None, shifts=(1, 2)), (SHAPE,), LayerError, "a roll without dims takes one shift"),
    (dict(dims=(1,)), (SHAPE,), LayerError, "missing parameter 'shifts'"),
    (dict(dims=(4,), shifts=(1,)), (SHAPE,), ShapeError, "dim 4 is out of range"),
    (dict(dims=(2,)), (SHAPE, (1,)), LayerError, "takes its shifts from tensors"),  # $shifts: a dynamic export
])
def test_roll_refuses(params, shapes, error, match):
    refused(error, "torch.roll", params, shapes=shapes, match=match)
