"""Tensor.slice, torch.narrow, Tensor.select and torch.unbind against positions counted out by hand.

The expected values pick elements with np.take and index lists built here by Python's slicing rules spelt out
(negative bounds from the end, then clamped), not with the layers' numpy indexing. Operators are made the way
pnnx writes them (the forms and parameters of real exports, swin's 2x2 patch merging among them). Every case
also runs every path (the numpy backend and OpenCL on each device) against the reference, bit for bit.

This module also holds what the other data-movement tests share: `rand` and `refused`.
"""

import numpy as np
import pytest

import kuiper.layers.slice  # noqa: F401  (registers the layers)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(15)
END = 2147483647
SHAPE = (2, 6, 5, 7)


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-1000, 1000, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def refused(error, type, params, shapes=(SHAPE,), outputs=1, match=""):
    """The layer (or its shape inference, for errors that need the input) raises `error`: one line naming the
    operator and saying `match`."""
    with pytest.raises(error) as info:
        make_layer(type, name="t", params=params, input_shapes=list(shapes), num_outputs=outputs).output_shapes(
            list(shapes))
    message = str(info.value)
    assert "\n" not in message and f"{type} operator 't'" in message and match in message, message


def positions(n, start, end, step):
    """The indices x[start:end:step] takes along a dim of n, with Python's rules written out."""
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    taken = []
    while start < end:
        taken.append(start)
        start += step
    return taken


def check(type, x, params, expected, outputs=1):
    """The reference equals `expected`, and every other path equals the reference."""
    got = make_layer(type, params=params, input_shapes=[x.shape], num_outputs=outputs).run_numpy(x)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g, e)
    assert_every_path_matches_reference(type, x, rtol=0, params=params, num_outputs=outputs)


# ---- Tensor.slice --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim, start, end, step", [
    (1, -3, END, 1),     # x[:, -3:]
    (3, 0, END, 2),      # x[..., ::2]
    (1, 1, -1, 1),       # x[:, 1:-1]
    (2, -10, 3, 1),      # a start before the beginning is clamped
    (-1, 2, 100, 3),     # and an end past the end
    (0, 1, END, 1),
    (1, 4, 2, 1),        # empty
])
def test_slice_of_one_dim(dim, start, end, step):
    x = rand(*SHAPE)
    expected = np.take(x, positions(SHAPE[dim], start, end, step), axis=dim)
    check("Tensor.slice", x, dict(dim=dim, start=start, end=end, step=step), [expected])


@pytest.mark.parametrize("dims, starts, ends, steps, selects", [
    ((1, 2), (0, 0), (END, END), (2, 2), (END, END)),      # swin's patch merging, four ways
    ((1, 2), (1, 0), (END, END), (2, 2), (END, END)),
    ((1, 2), (1, 1), (END, END), (2, 2), (END, END)),
    ((1, 2), (0, 0), (4, 3), (1, 1), (END, END)),          # swin_v2's crop back after padding
    ((0, 1, 2, 3), (1, 2, 1, 0), (END, 5, END, -2), (1, 1, 1, 1), (END,) * 4),
    ((1, 2), (0, 1), (0, 4), (0, 1), (0, END)),            # x[:, 0, 1:4]: a select inside the slice
    ((1, 2), (1, 0), (4, 0), (1, 0), (END, 2)),            # x[:, 1:4, 2]
    ((2, 3), (0, 1), (0, -1), (0, 1), (-1, END)),          # x[:, :, -1, 1:-1]
    ((-2, -1), (2, 1), (-2, END), (1, 3), (END, END)),     # x[..., 2:-2, 1::3], dims counted from the end
])
def test_slice_of_several_dims(dims, starts, ends, steps, selects):
    x = rand(*SHAPE)
    expected = x
    # from the last dim back, so that a select dropping a dim does not move the ones still to do
    for dim, start, end, step, select in sorted(zip(dims, starts, ends, steps, selects), key=lambda c: -(c[0] % 4)):
        if select == END:
            expected = np.take(expected, positions(SHAPE[dim], start, end, step), axis=dim % 4)
        else:
            expected = np.take(expected, select % SHAPE[dim], axis=dim % 4)
    params = dict(dims=dims, starts=starts, ends=ends, steps=steps, selects=selects)
    check("Tensor.slice", x, params, [expected])


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.uint8])
def test_slice_moves_every_element_size(dtype):
    x = rand(3, 6, 5, 7, dtype=dtype)
    params = dict(dims=(1, 3), starts=(1, 0), ends=(END, 5), steps=(2, 2), selects=(END, END))
    check("Tensor.slice", x, params, [x[:, 1::2, :, 0:5:2]])


@pytest.mark.parametrize("params, error, match", [
    (dict(dim=1, start=0, end=END, step=0), LayerError, "step=0 along dim 1 must be >= 1"),
    (dict(dim=1, start=END, end=0, step=-1), LayerError, "step=-1"),
    (dict(dims=(1, 2), starts=(0, 0), ends=(END, END), steps=(1, -2), selects=(END, END)), LayerError, "step=-2"),
    (dict(dims=(1, 2), starts=(0,), ends=(END, END), steps=(1, 1), selects=(END, END)), LayerError,
     "'starts' must have 2 values"),
    (dict(dims=(1, 2), starts=(0, 0), ends=(END, END), steps=(1, 1)), LayerError, "missing parameter 'selects'"),
    (dict(dim=1, start=0, end=END, step=1, stride=2), LayerError, "unknown parameter(s) stride"),
    (dict(dim=4, start=0, end=END, step=1), ShapeError, "dim 4 is out of range"),
    (dict(dims=(1, -3), starts=(0, 0), ends=(END, END), steps=(1, 1), selects=(END, END)), ShapeError,
     "name a dim twice"),
    (dict(dims=(1,), starts=(0,), ends=(0,), steps=(0,), selects=(6,)), ShapeError,
     "index 6 is out of range for dim 1 of size 6"),
])
def test_slice_refuses(params, error, match):
    refused(error, "Tensor.slice", params, match=match)


def test_slice_with_bounds_from_tensors_is_refused():
    # a dynamic-shape export: `Tensor.slice ... dim=1 start=0 step=1 $input=0 $end=1`
    refused(LayerError, "Tensor.slice", dict(dim=1, start=0, step=1), shapes=(SHAPE, ()),
            match="takes its starts or ends from tensors")


# ---- torch.narrow --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim, start, length", [(1, 1, 3), (-1, 2, 3), (-1, -4, 3), (0, 0, 2), (2, 5, 0)])
def test_narrow(dim, start, length):
    x = rand(*SHAPE)
    first = start % SHAPE[dim] if start < 0 else start
    expected = np.take(x, list(range(first, first + length)), axis=dim)
    check("torch.narrow", x, dict(dim=dim, start=start, length=length), [expected])


@pytest.mark.parametrize("params, error, match", [
    (dict(dim=1, start=4, length=3), ShapeError, "start=4 length=3 does not fit in dim 1 of size 6"),
    (dict(dim=1, start=-7, length=1), ShapeError, "does not fit"),
    (dict(dim=1, start=0, length=-1), LayerError, "length=-1 must be >= 0"),
])
def test_narrow_refuses(params, error, match):
    refused(error, "torch.narrow", params, match=match)


# ---- Tensor.select and torch.unbind ----------------------------------------------------------------------
@pytest.mark.parametrize("dim, index", [(1, 0), (1, -1), (0, 1), (-1, 6), (2, -5)])
def test_select(dim, index):
    x = rand(*SHAPE)
    check("Tensor.select", x, dict(dim=dim, index=index), [np.take(x, index % SHAPE[dim], axis=dim)])


@pytest.mark.parametrize("params, shapes, match", [
    (dict(dim=1, index=6), (SHAPE,), "index 6 is out of range for dim 1 of size 6"),
    (dict(dim=1, index=-7), (SHAPE,), "index -7 is out of range"),
    (dict(dim=1), (SHAPE, ()), "takes its index from tensors"),
])
def test_select_refuses(params, shapes, match):
    refused((LayerError, ShapeError), "Tensor.select", params, shapes=shapes, match=match)


@pytest.mark.parametrize("shape, dim", [((3, 4, 5, 2), 0), ((2, 3, 5, 7), 1), ((2, 3, 5, 4), -1), ((3, 1, 24), 0)])
def test_unbind(shape, dim):
    x = rand(*shape)
    n = shape[dim]
    check("torch.unbind", x, dict(dim=dim), [np.take(x, i, axis=dim) for i in range(n)], outputs=n)


def test_unbind_needs_one_output_per_entry():
    refused(ShapeError, "torch.unbind", dict(dim=1), outputs=3, match="dim 1 of a (2, 6, 5, 7) input has 6 entries, "
                                                                       "the operator has 3 outputs")
