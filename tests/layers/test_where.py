"""torch.where and Tensor.masked_fill against a choice made per output element: each index names the condition's
element and the element of the side it picks (size-1 dims read at 0, added leading dims dropped), in Python,
not numpy's where or copyto; and the result dtypes against PyTorch's promotion rules as a table."""

import numpy as np
import pytest

import kuiper
import kuiper.layers.where  # noqa: F401  (registers the layers)
from conftest import assert_every_path_matches_reference, write_model
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

rng = np.random.default_rng(7)


def at(x, index):
    """x's element for an output index under broadcasting; x itself where it is a number."""
    if not isinstance(x, np.ndarray):
        return x
    index = index[len(index) - x.ndim:]
    return x[tuple(i if n > 1 else 0 for i, n in zip(index, x.shape))]


def chosen(shape, dtype, condition, when_true, when_false):
    out = np.empty(shape, dtype)
    for index in np.ndindex(shape):
        out[index] = at(when_true, index) if at(condition, index) else at(when_false, index)
    return out


def where(params, *inputs):
    layer = make_layer("torch.where", params=params, input_shapes=[np.shape(x) for x in inputs])
    return layer.run_numpy(*inputs)[0]


def check_where(params, inputs, expected):
    out = where(params, *inputs)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)
    assert_every_path_matches_reference("torch.where", *inputs, rtol=0, params=params)


def test_where_broadcasts_three_tensors():
    c = rng.random((2, 1, 4)) > 0.5
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 3, 1)).astype(np.float32)
    check_where({}, [c, a, b], chosen((2, 3, 4), np.float32, c, a, b))


def test_where_makes_a_text_models_attention_bias():
    # transformers' eager_mask: where(keep, torch.zeros(()), finfo.min), as pnnx writes it (other a number)
    keep = np.broadcast_to(np.array([1, 1, 1, 0], bool)[None, None, None, :], (1, 1, 4, 4)).copy()
    zero = np.zeros((), np.float32)
    lowest = float(np.finfo(np.float32).min)
    check_where(dict(other=lowest), [keep, zero], chosen((1, 1, 4, 4), np.float32, keep, 0.0, lowest))


def test_where_with_the_input_a_number_and_a_condition_of_bytes():
    c = (rng.random((3, 5)) > 0.5).astype(np.uint8)  # PyTorch's older masks: nonzero means True
    b = rng.standard_normal((3, 5)).astype(np.float32)
    check_where(dict(input=3.0), [c, b], chosen((3, 5), np.float32, c, 3.0, b))


@pytest.mark.parametrize("tensors, numbers, expected", [
    ([np.int64], [2.5], np.float32),     # a float number lifts integer tensors to the default float
    ([np.bool_], [1], np.int64),         # an int number lifts bool tensors to int64
    ([np.float32], [2], np.float32),     # a number of a narrower kind changes nothing
    ([np.int32], [7], np.int32),
    ([np.int32, np.int64], [], np.int64),
    ([np.int64, np.float32], [], np.float32),
    ([], [1, 0], np.int64),
    ([], [1.0, 0], np.float32),
])
def test_where_promotes_as_pytorch_does(tensors, numbers, expected):
    slots = [n for n in ("input", "other")]
    params = dict(zip(slots[len(tensors):], numbers))
    c = np.array([True, False, True])
    inputs = [c] + [np.arange(3).astype(t) for t in tensors]
    out = where(params, *inputs)
    assert out.dtype == expected
    values = inputs[1:] + numbers
    np.testing.assert_array_equal(out, chosen((3,), expected, c, *values))


def test_where_takes_its_operands_by_their_names(tmp_path):
    # the operands listed as other, condition, input: the `$` names say which is which
    text = """7767517
5 4
pnnx.Input  in_c  0 1 c #c=(2,3)i64
pnnx.Input  in_a  0 1 a #a=(2,3)f32
pnnx.Input  in_b  0 1 b #b=(2,3)f32
torch.where w     3 1 b c a y $other=b $condition=c $input=a
pnnx.Output out   1 0 y
"""
    graph = kuiper.load(write_model(tmp_path, "w", text, {}), backend="reference")
    c = np.array([[1, 0, 1], [0, 0, 5]])  # nonzero counts as True
    a, b = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(graph.forward(c, a, b)[0], (c != 0).astype(np.float32))


def masked_fill(params, *inputs):
    layer = make_layer("Tensor.masked_fill", params=params, input_shapes=[np.shape(x) for x in inputs])
    return layer.run_numpy(*inputs)[0]


@pytest.mark.parametrize("value", [-1e4, "-inf", 0])
def test_masked_fill_with_a_number(value):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    mask = rng.random((3, 1)) > 0.5
    out = masked_fill(dict(value=value), x, mask)
    number = float(value)
    np.testing.assert_array_equal(out, chosen(x.shape, np.float32, mask, number, x))
    assert_every_path_matches_reference("Tensor.masked_fill", x, mask, rtol=0, params=dict(value=value))


def test_masked_fill_with_a_0d_tensor_keeps_the_inputs_dtype():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    mask = np.tril(np.ones((4, 4), bool))[1:]
    value = np.array(-2.7, np.float32)  # cast to the input's int64 as PyTorch does: toward zero
    out = masked_fill({}, x, mask, value)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, chosen(x.shape, np.int64, mask, -2, x))
    assert_every_path_matches_reference("Tensor.masked_fill", x, mask, value, rtol=0)


def test_what_does_not_fit_is_refused():
    c, x = np.ones((2, 3), bool), np.ones((2, 3), np.float32)
    with pytest.raises(LayerError, match=r"expects 3 input\(s\) \(condition, input, other\), the graph gives 2"):
        make_layer("torch.where", input_shapes=[c.shape, x.shape])
    with pytest.raises(ShapeError, match="cannot broadcast"):
        where({}, c, x, np.ones((4,), np.float32))
    with pytest.raises(ShapeError, match=r"the mask \(4, 3\) does not broadcast to the input \(2, 3\)"):
        masked_fill(dict(value=1.0), x, np.ones((4, 3), bool))
    with pytest.raises(ShapeError, match="the value must be a number or a 0-d tensor"):
        masked_fill({}, x, c, np.ones((3,), np.float32))
    with pytest.raises(LayerError, match="must be a number"):
        make_layer("torch.where", params=dict(other="abc"), input_shapes=[c.shape, x.shape])
