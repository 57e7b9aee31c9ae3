"""Checkpoint of lesson 2: exercises/lesson_02.py's offset, strides and padding, held to numpy and to
kuiper.Tensor."""

import numpy as np
import pytest

from kuiper import Tensor
from lesson_tools import exercise

ex = exercise(2)
SHAPES = [(7,), (3, 5), (2, 3, 4), (1, 2, 3, 4), (2, 1, 4, 3, 5)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_offset_is_numpys_ravel_multi_index(shape):
    rng = np.random.default_rng(len(shape))
    for _ in range(20):
        index = tuple(int(rng.integers(n)) for n in shape)
        assert ex.offset(shape, index) == np.ravel_multi_index(index, shape)
    assert ex.offset(shape, tuple(n - 1 for n in shape)) == int(np.prod(shape)) - 1


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
def test_strides_are_numpys(shape, dtype):
    assert tuple(ex.strides(shape, np.dtype(dtype).itemsize)) == np.empty(shape, dtype).strides


@pytest.mark.parametrize("pads", [(2, 1, 0, 3), (0, 0, 0, 0), (1, 0, 0, 2), (0, 4, 1, 0)], ids=str)
def test_pad_is_tensor_padding(pads):
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for value in (0.0, -1.0):
        padded = ex.pad(x, pads, value)
        expected = Tensor(x).padding(pads, value=value).numpy()
        assert padded.shape == expected.shape and padded.dtype == np.float32
        np.testing.assert_array_equal(padded, expected)
        assert not np.shares_memory(padded, x)  # even zero padding builds a new array


def test_pad_keeps_leading_axes_of_any_rank():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ex.pad(x, (1, 0, 0, 1), 9.0), np.pad(x, ((1, 0), (0, 1)), constant_values=9.0))
