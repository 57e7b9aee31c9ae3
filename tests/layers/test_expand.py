"""Expand, expand_as, repeat, tile and flip against element formulas written as index arithmetic: every output
element names the input element it copies (np.ndindex over small shapes), not numpy's broadcast_to, tile or flip.
On OpenCL they are strided copies with zero strides (expand, repeat) and negative ones (flip)."""

import numpy as np
import pytest

import kuiper.layers.expand  # noqa: F401  (registers the layers)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.opencl.strided import MAX_RANK, contiguous_strides, merge_dims, sliced
from kuiper.runtime.backends import make_layer
from test_slice import SHAPE, rand, refused


def from_source(out_shape, x, source):
    """The array of `out_shape` whose element at each index is x[source(index)]."""
    out = np.empty(out_shape, x.dtype)
    for index in np.ndindex(out_shape):
        out[index] = x[source(index)]
    return out


def check(type, params, expected, *inputs, recorded=None):
    layer = make_layer(type, params=params, input_shapes=recorded or [x.shape for x in inputs])
    np.testing.assert_array_equal(layer.run_numpy(*inputs)[0], expected)
    assert_every_path_matches_reference(type, *inputs, rtol=0, params=params, input_shapes=recorded or
                                        [x.shape for x in inputs])


def broadcast_source(in_shape, out_shape):
    """Output index -> input index under broadcasting: added leading dims dropped, size-1 dims read at 0."""
    added = len(out_shape) - len(in_shape)
    return lambda index: tuple(i if n > 1 else 0 for i, n in zip(index[added:], in_shape))


# ---- expand and expand_as -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, sizes, target", [
    ((2, 1, 5, 7), (-1, 6, -1, -1), (2, 6, 5, 7)),
    ((1, 6, 5, 7), (3, 2, 6, 5, 7), (3, 2, 6, 5, 7)),
    ((2, 1, 5, 1), (-1, 4, -1, 3), (2, 4, 5, 3)),
    ((1, 1, 3), (2, 4, 0, 3), (2, 4, 0, 3)),          # an added dim of size 0
    ((2, 3), (2, 3), (2, 3)),                        # nothing to do
])
def test_expand(shape, sizes, target):
    x = rand(*shape)
    check("Tensor.expand", dict(sizes=sizes), from_source(target, x, broadcast_source(shape, target)), x)


def test_expand_follows_the_batch_its_sizes_were_taken_at():
    # exported at batch 2 as sizes=(2,6,5,7): the 2 kept the batch then, and keeps it at batch 3
    x = rand(3, 1, 5, 7)
    target = (3, 6, 5, 7)
    check("Tensor.expand", dict(sizes=(2, 6, 5, 7)), from_source(target, x, broadcast_source(x.shape, target)), x,
          recorded=[(2, 1, 5, 7)])


@pytest.mark.parametrize("shape, other", [((2, 1, 5, 7), SHAPE), ((5, 1), SHAPE), ((1,), (3, 4))])
def test_expand_as(shape, other):
    x, y = rand(*shape), rand(*other)
    check("Tensor.expand_as", {}, from_source(other, x, broadcast_source(shape, other)), x, y)


@pytest.mark.parametrize("type, params, shapes, error, match", [
    ("Tensor.expand", dict(sizes=(2, 3, 5, 7)), (SHAPE,), ShapeError, "cannot expand a (2, 6, 5, 7) input to (2, 3"),
    ("Tensor.expand", dict(sizes=(6, 5, 7)), (SHAPE,), ShapeError, "fewer sizes than the (2, 6, 5, 7) input has dims"),
    ("Tensor.expand", dict(sizes=(-1, 2, 6, 5, 7)), (SHAPE,), ShapeError, "-1 cannot size the 1 dim(s) it adds"),
    ("Tensor.expand", dict(sizes=(2, -2, 5, 7)), ((2, 1, 5, 7),), LayerError, "must be >= 0, or -1 to keep a dim"),
    ("Tensor.expand_as", {}, (SHAPE, (2, 6, 5, 1)), ShapeError, "cannot expand"),
    ("Tensor.expand_as", {}, (SHAPE,), LayerError, "expects 2 input(s), the graph gives 1"),
])
def test_expand_refuses(type, params, shapes, error, match):
    refused(error, type, params, shapes=shapes, match=match)


# ---- repeat and tile --------------------------------------------------------------------------------------
def tiled(x, counts):
    """np.tile's and torch.repeat's result, element by element: the input index is the output's modulo its size."""
    shape = (1,) * (len(counts) - x.ndim) + x.shape
    counts = (1,) * (len(shape) - len(counts)) + tuple(counts)
    x = x.reshape(shape)
    return from_source(tuple(n * c for n, c in zip(shape, counts)), x,
                       lambda index: tuple(i % n for i, n in zip(index, shape)))


@pytest.mark.parametrize("shape, sizes", [
    (SHAPE, (1, 2, 1, 3)), (SHAPE, (2, 1, 1, 1, 2)), ((2, 3, 2, 3), (2, 3, 2, 2)), ((3, 1, 4), (2, 5, 1)),
    ((2, 3, 2, 3), (2, 2, 3, 2, 2)),   # 9 interleaved dims: more than cl/copy.cl walks at once
    ((2, 3), (0, 2)),                  # no copies at all
])
def test_repeat(shape, sizes):
    x = rand(*shape)
    check("Tensor.repeat", dict(sizes=sizes), tiled(x, sizes), x)


@pytest.mark.parametrize("shape, dims", [(SHAPE, (2, 1)), (SHAPE, (2, 1, 1, 1, 1)), (SHAPE, (3, 2, 1, 2)),
                                         ((4,), (3,))])
def test_tile(shape, dims):
    x = rand(*shape)
    check("torch.tile", dict(dims=dims), tiled(x, dims), x)


def test_repeat_of_int64():
    x = rand(2, 3, dtype=np.int64)
    check("Tensor.repeat", dict(sizes=(2, 1, 3)), tiled(x, (2, 1, 3)), x)


@pytest.mark.parametrize("type, params, error, match", [
    ("Tensor.repeat", dict(sizes=(2, 3)), ShapeError, "sizes=(2, 3) has fewer counts than the (2, 6, 5, 7) input"),
    ("Tensor.repeat", dict(sizes=(1, -1, 1, 1)), LayerError, "sizes=(1, -1, 1, 1) must be >= 0"),
    ("torch.tile", dict(dims=(-2,)), LayerError, "dims=(-2,) must be >= 0"),
    ("torch.tile", dict(dims=2), LayerError, "'dims' must be a list of ints"),
])
def test_repeat_refuses(type, params, error, match):
    refused(error, type, params, match=match)


# ---- flip -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [(1,), (0, -1), (-1, -2), (0, 1, 2, 3)])
def test_flip(dims):
    x = rand(*SHAPE)
    axes = {d % 4 for d in dims}
    expected = from_source(SHAPE, x, lambda index: tuple(
        n - 1 - i if axis in axes else i for axis, (i, n) in enumerate(zip(index, SHAPE))))
    check("torch.flip", dict(dims=dims), expected, x)


def test_flip_of_float16():
    x = rand(3, 4, 5, dtype=np.float16)
    check("torch.flip", dict(dims=(0, 2)), x[::-1, :, ::-1], x)


@pytest.mark.parametrize("dims, match", [((1, -3), "name a dim twice"), ((4,), "dim 4 is out of range")])
def test_flip_refuses(dims, match):
    refused(ShapeError, "torch.flip", dict(dims=dims), match=match)


def test_copies_of_more_dims_than_the_kernel_walks():
    # flipping every other one of 8 dims: no two neighbours merge, so on OpenCL the copy is enqueued once per
    # index of its outer dims
    x = rand(*(2,) * 8)
    index = (slice(None, None, -1), slice(None)) * 4
    assert len(merge_dims(x.shape, contiguous_strides(x.shape), sliced(x, index).strides)) > MAX_RANK
    expected = from_source(x.shape, x, lambda at: tuple(1 - i if axis % 2 == 0 else i for axis, i in enumerate(at)))
    check("torch.flip", dict(dims=(0, 2, 4, 6)), expected, x)
