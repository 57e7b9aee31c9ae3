"""The claims of lesson 2: kuiper.Tensor's layout, views, padding and broadcasting, against numpy and loops."""

import itertools

import numpy as np
import pytest

from kuiper import Tensor
from lesson_tools import check_shell_commands


def offset(shape, index):
    """Row-major position of `index`, by Horner's rule (the formula of the notes)."""
    position = 0
    for i, n in zip(index, shape):
        position = position * n + i
    return position


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 7, 3), (3, 2, 1, 6)])
def test_offset_formula_and_strides_describe_row_major_memory(shape):
    t = Tensor(np.arange(np.prod(shape)).reshape(shape))
    flat = t.flatten().numpy()
    for index in itertools.product(*(range(n) for n in shape)):
        k = offset(shape, index)
        assert k == np.ravel_multi_index(index, shape)
        assert flat[k] == t.numpy()[index]
    # stride of axis i = itemsize times the product of the sizes after it
    expected = tuple(4 * int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    assert t.data.strides == expected


def test_nchw_accessors_for_every_rank():
    t1 = Tensor(np.zeros((5,)))
    assert (t1.batch, t1.channels, t1.rows, t1.cols) == (1, 1, 1, 5)
    t3 = Tensor(np.zeros((2, 3, 4)))
    assert (t3.batch, t3.channels, t3.rows, t3.cols) == (1, 2, 3, 4)
    t4 = Tensor(np.zeros((6, 2, 3, 4)))
    assert (t4.batch, t4.channels, t4.rows, t4.cols) == (6, 2, 3, 4)
    assert t4.dtype == np.float32 and t4.size == 144 and t4.nbytes == 576


@pytest.mark.parametrize("pads,value", [((1, 0, 0, 2), -1.0), ((2, 1, 0, 3), 0.0), ((0, 0, 0, 0), 5.0)])
def test_padding_matches_a_hand_built_array(pads, value):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    top, bottom, left, right = pads
    expected = np.full((2, 3, 4 + top + bottom, 5 + left + right), value, dtype=np.float32)
    expected[:, :, top:top + 4, left:left + 5] = x
    padded = Tensor.from_numpy(x).padding(pads, value=value)
    np.testing.assert_array_equal(padded.numpy(), expected)
    assert not padded.is_view_of(Tensor.from_numpy(x))  # even zero padding copies


def test_which_operations_are_views():
    t = Tensor(np.arange(24).reshape(1, 2, 3, 4))
    assert t.reshape(4, 6).is_view_of(t)
    assert t[..., ::2].is_view_of(t)
    assert not Tensor(t.numpy().T.copy()).is_view_of(t)
    transposed = Tensor.from_numpy(t.numpy().transpose(0, 1, 3, 2))
    assert transposed.is_view_of(t) and not transposed.reshape(-1).is_view_of(t)
    assert not Tensor(np.zeros(3, dtype=np.float64)).is_view_of(Tensor(np.zeros(3)))
    # writing through a view changes the original
    t.reshape(-1)[5] = Tensor(np.array(-1.0, np.float32))
    assert t.numpy()[0, 0, 1, 1] == -1.0


def test_broadcasting_a_bias_equals_explicit_loops():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    bias = rng.standard_normal((3, 1, 1)).astype(np.float32)
    got = (Tensor.from_numpy(x) + Tensor.from_numpy(bias)).numpy()
    expected = np.empty_like(x)
    for n, c, h, w in itertools.product(range(2), range(3), range(4), range(5)):
        expected[n, c, h, w] = x[n, c, h, w] + bias[c, 0, 0]
    np.testing.assert_array_equal(got, expected)
    assert np.broadcast_shapes((5, 1, 4), (3, 1)) == (5, 3, 4)
    with pytest.raises(ValueError):
        np.broadcast_shapes((2, 3), (3, 2))


def test_fill_and_transform_work_in_place():
    t = Tensor.zeros(2, 3)
    memory = t.numpy()
    t.fill(range(6))
    np.testing.assert_array_equal(memory, np.arange(6).reshape(2, 3))
    t.transform(np.square)
    assert t.numpy() is memory
    np.testing.assert_array_equal(memory, np.arange(6).reshape(2, 3) ** 2)


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(2, capsys)
