"""kuiper.Tensor: NCHW accessors, views vs copies, padding, broadcasting."""

import numpy as np
import pytest

from kuiper import Tensor


def test_nchw_accessors_and_default_dtype():
    t = Tensor.zeros(2, 3, 5, 7)
    assert (t.batch, t.channels, t.rows, t.cols) == (2, 3, 5, 7)
    assert t.dtype == np.float32 and t.size == 210 and t.nbytes == 840
    vec = Tensor.zeros(4)
    assert (vec.batch, vec.channels, vec.rows, vec.cols) == (1, 1, 1, 4)


def test_fill_with_scalar_and_with_values_in_row_major_order():
    t = Tensor.empty((2, 3)).fill(1.5)
    assert np.all(t.numpy() == 1.5)
    t.fill(range(6))
    assert t.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError):
        t.fill([1, 2])


def test_reshape_and_flatten_are_views_that_keep_row_major_order():
    t = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    r = t.reshape(4, 6)
    assert r.is_view_of(t)
    assert r.numpy()[1].tolist() == [6, 7, 8, 9, 10, 11]
    f = t.flatten()
    f.numpy()[0] = 100  # writing through the view changes the original
    assert t.numpy()[0, 0, 0] == 100


def test_from_numpy_shares_memory_and_padding_copies():
    a = np.ones((1, 2, 3, 3), dtype=np.float32)
    t = Tensor.from_numpy(a)
    assert t.numpy() is a
    p = t.padding((1, 0, 2, 1), value=-1.0)
    assert p.shape == (1, 2, 4, 6)
    assert not p.is_view_of(t)
    assert p.numpy()[0, 0, 0].tolist() == [-1] * 6                 # the top row
    assert p.numpy()[0, 1, 1].tolist() == [-1, -1, 1, 1, 1, -1]   # left 2, right 1


def test_elementwise_ops_broadcast_like_numpy():
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    bias = Tensor(np.array([10, 20, 30], dtype=np.float32))
    assert ((x + bias).numpy() == np.arange(6).reshape(2, 3) + [10, 20, 30]).all()
    assert ((x * 2).numpy() == np.arange(6).reshape(2, 3) * 2).all()
    assert ((x - 1) / 2 == (np.arange(6).reshape(2, 3) - 1) / 2)
    assert (-x).numpy()[1, 2] == -5


def test_reflected_ops_keep_the_order_of_the_operands():
    x = Tensor(np.array([1, 2, 4], dtype=np.float32))
    np.testing.assert_array_equal((10 - x).numpy(), [9, 8, 6])
    np.testing.assert_array_equal((8 / x).numpy(), [8, 4, 2])
    np.testing.assert_array_equal((3 + x).numpy(), [4, 5, 7])


def test_transform_applies_in_place():
    t = Tensor(np.array([0.0, 1.0], dtype=np.float32))
    t.transform(np.exp)
    np.testing.assert_allclose(t.numpy(), [1.0, np.e], rtol=1e-6)
