"""Shape layers (reshape, flatten, permute, transpose, cat, chunk, split, squeeze, identity) against numpy.

Every expected value is computed here with numpy's own reshape/transpose/concatenate/split, so the tests do
not share code with the layers. Operators are built the way pnnx writes them (types and parameter keys taken
from real exports); the recorded input shapes are those of an export at batch 2, and the layers run at
batch 1 and 3 as the graph does.
"""

import numpy as np
import pytest

# importing the modules registers their layers
import kuiper.layers.cat  # noqa: F401
import kuiper.layers.chunk  # noqa: F401
import kuiper.layers.flatten  # noqa: F401
import kuiper.layers.identity  # noqa: F401
import kuiper.layers.permute  # noqa: F401
import kuiper.layers.reshape  # noqa: F401
import kuiper.layers.split  # noqa: F401
import kuiper.layers.squeeze  # noqa: F401
import kuiper.layers.transpose  # noqa: F401
import kuiper.layers.unsqueeze  # noqa: F401
from kuiper.core.errors import LayerError, ShapeError
from kuiper.layers.registry import is_supported
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(0)
BATCHES = [1, 3]
RECORDED = (2, 6, 5, 7)  # the input as an export at batch 2 records it: odd H and W


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def layer(type, params=None, recorded=(RECORDED,), outputs=1):
    return make_layer(type, name="t", params=params or {}, input_shapes=list(recorded), num_outputs=outputs)


def check(outputs, expected):
    """The layer's outputs equal numpy's, in count, shape, dtype and values."""
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("type", [
    "Tensor.reshape", "Tensor.view", "torch.flatten", "nn.Flatten", "Tensor.permute", "torch.transpose",
    "torch.cat", "torch.chunk", "torch.split", "torch.tensor_split", "torch.squeeze", "torch.unsqueeze",
    "nn.Identity", "nn.Dropout", "nn.Dropout2d", "F.dropout",
])
def test_every_pnnx_spelling_is_registered(type):
    assert is_supported(type)


# ---- reshape ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("type", ["Tensor.reshape", "Tensor.view"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("shape, target", [
    ((2, 210), (-1, 210)),          # x.view(x.size(0), -1) exported at batch 2
    ((2, 3, 2, 5, 7), (-1, 3, 2, 5, 7)),
    ((2, -1, 7), (-1, 30, 7)),      # -1 inferred after the batch is rescaled
    ((-1, 6, 35), (-1, 6, 35)),     # a -1 batch, as a dynamic export writes it
])
def test_reshape_follows_the_batch(type, batch, shape, target):
    x = rand(batch, 6, 5, 7)
    reshape = layer(type, {"shape": shape})
    check(reshape.run_numpy(x), [x.reshape(target)])


def test_reshape_at_the_recorded_batch_keeps_the_literal_shape():
    x = rand(*RECORDED)
    check(layer("Tensor.reshape", {"shape": (12, 35)}).run_numpy(x), [x.reshape(12, 35)])


def test_reshape_merging_the_batch_is_ambiguous_at_another_batch():
    reshape = layer("Tensor.reshape", {"shape": (12, 35)})  # batch 2 merged with 6 channels
    with pytest.raises(ShapeError) as info:
        reshape.output_shapes([(3, 6, 5, 7)])
    message = str(info.value)
    assert "Tensor.reshape operator 't'" in message
    assert str(RECORDED) in message and str((3, 6, 5, 7)) in message


@pytest.mark.parametrize("shape, other", [((64, 256), (1, 64, 256)), ((2, 6, 5, 7), (12, 35))])
def test_reshape_as_takes_the_other_inputs_shape(shape, other):
    # LeViT as pnnx writes it: `Tensor.reshape_as 2 1 12 10 13 $input=12 $other=10`
    from conftest import assert_every_path_matches_reference

    x, y = rand(*shape), rand(*other)
    reshape_as = layer("Tensor.reshape_as", recorded=(shape, other))
    check(reshape_as.run_numpy(x, y), [x.reshape(other)])
    assert_every_path_matches_reference("Tensor.reshape_as", x, y, rtol=0)
    with pytest.raises(ShapeError, match=r"cannot reshape a \(64, 256\) input as the \(1, 64, 255\) one"):
        layer("Tensor.reshape_as", recorded=((64, 256), (1, 64, 255))).output_shapes([(64, 256), (1, 64, 255)])


def test_reshape_to_a_size_that_does_not_fit_raises():
    with pytest.raises(ShapeError):
        layer("Tensor.reshape", {"shape": (2, -1, 4)}).output_shapes([RECORDED])


@pytest.mark.parametrize("recorded", [None, (None, 6, 5, 7)])
def test_reshape_with_an_unknown_recorded_batch_uses_the_literal_shape(recorded):
    reshape = layer("Tensor.reshape", {"shape": (2, 210)}, recorded=(recorded,))
    assert reshape.output_shapes([(2, 6, 5, 7)]) == [(2, 210)]
    with pytest.raises(ShapeError):
        reshape.output_shapes([(3, 6, 5, 7)])


@pytest.mark.parametrize("params", [{"shape": (-1, -1)}, {"shape": (2, -2)}, {"shape": (2, 1.5)}, {}])
def test_reshape_bad_params(params):
    with pytest.raises(LayerError):
        layer("Tensor.reshape", params)


def test_reshape_with_a_shape_tensor_input_is_refused():
    with pytest.raises(LayerError, match="dynamic-shape export"):
        layer("Tensor.reshape", recorded=(RECORDED, (2,)))


# ---- flatten ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("type, params, target", [
    ("torch.flatten", {"start_dim": 1, "end_dim": -1}, lambda b: (b, 210)),
    ("torch.flatten", {"start_dim": 2, "end_dim": -1}, lambda b: (b, 6, 35)),
    ("torch.flatten", {"start_dim": 1, "end_dim": 2}, lambda b: (b, 30, 7)),
    ("torch.flatten", {"start_dim": -3, "end_dim": -3}, lambda b: (b, 6, 5, 7)),
    ("torch.flatten", {}, lambda b: (b * 210,)),
    ("nn.Flatten", {}, lambda b: (b, 210)),
])
def test_flatten(batch, type, params, target):
    x = rand(batch, 6, 5, 7)
    check(layer(type, params).run_numpy(x), [x.reshape(target(batch))])


@pytest.mark.parametrize("params", [{"start_dim": 3, "end_dim": 1}, {"start_dim": 4}, {"end_dim": -5}])
def test_flatten_dims_that_do_not_fit_the_input(params):
    with pytest.raises(ShapeError):
        layer("torch.flatten", params).output_shapes([RECORDED])


def test_flatten_bad_param():
    with pytest.raises(LayerError):
        layer("torch.flatten", {"start_dim": 1.0})


# ---- permute and transpose --------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dims", [(0, 2, 3, 1), (0, 3, 1, 2), (0, -1, 1, -2), (3, 2, 1, 0)])
def test_permute(batch, dims):
    x = rand(batch, 6, 5, 7)
    axes = [d % 4 for d in dims]
    check(layer("Tensor.permute", {"dims": dims}).run_numpy(x), [np.ascontiguousarray(x.transpose(axes))])


def test_permute_output_is_laid_out_in_the_new_order():
    x = rand(2, 3, 4)
    (out,) = layer("Tensor.permute", {"dims": (2, 0, 1)}, recorded=[(2, 3, 4)]).run_numpy(x)
    np.testing.assert_array_equal(out.reshape(-1), x.transpose(2, 0, 1).copy().reshape(-1))


def test_permute_needs_an_input_of_its_rank():
    with pytest.raises(ShapeError):
        layer("Tensor.permute", {"dims": (0, 2, 1)}).output_shapes([RECORDED])


@pytest.mark.parametrize("dims", [(0, 0, 1, 2), (0, 4, 1, 2), (0, 1, 2, -5)])
def test_permute_bad_dims(dims):
    with pytest.raises(LayerError):
        layer("Tensor.permute", {"dims": dims})


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dim0, dim1", [(1, 2), (-1, -2), (1, 3), (0, -1), (2, 2)])
def test_transpose(batch, dim0, dim1):
    x = rand(batch, 6, 5, 7)
    transpose = layer("torch.transpose", {"dim0": dim0, "dim1": dim1})
    check(transpose.run_numpy(x), [np.ascontiguousarray(np.swapaxes(x, dim0, dim1))])


def test_transpose_dim_out_of_range():
    with pytest.raises(ShapeError):
        layer("torch.transpose", {"dim0": 1, "dim1": 4}).output_shapes([RECORDED])


def test_transpose_missing_dim():
    with pytest.raises(LayerError):
        layer("torch.transpose", {"dim0": 1})


# ---- cat --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dim, sizes", [(1, [6, 3]), (-1, [7, 7, 1]), (0, [1, 2]), (-3, [5, 1, 2, 3])])
def test_cat(batch, dim, sizes):
    base = [batch, 6, 5, 7]
    shapes = [tuple(base[:dim % 4] + [n] + base[dim % 4 + 1:]) for n in sizes]
    xs = [rand(*s) for s in shapes]
    cat = layer("torch.cat", {"dim": dim}, recorded=shapes)
    check(cat.run_numpy(*xs), [np.concatenate(xs, axis=dim)])


@pytest.mark.parametrize("other", [(3, 6, 4, 7), (3, 6, 5), (3, 6, 5, 7, 1)])
def test_cat_sizes_off_the_dim_must_agree(other):
    cat = layer("torch.cat", {"dim": 1}, recorded=[RECORDED, RECORDED])
    with pytest.raises(ShapeError):
        cat.output_shapes([(3, 6, 5, 7), other])


def test_cat_bad_dim_param():
    with pytest.raises(LayerError):
        layer("torch.cat", {"dim": "1"}, recorded=[RECORDED, RECORDED])


# ---- chunk, split, tensor_split ---------------------------------------------------------------------------
def pieces(x, sizes, axis):
    """numpy's split of x into pieces of the given lengths."""
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("length, chunks, dim, sizes", [
    (7, 3, 2, [3, 3, 1]),
    (6, 4, 1, [2, 2, 2]),           # four chunks asked, three made: PyTorch's rule
    (6, 3, -3, [2, 2, 2]),
    (5, 5, -1, [1, 1, 1, 1, 1]),
    (5, 1, 3, [5]),
])
def test_chunk(batch, length, chunks, dim, sizes):
    shape = [batch, 6, 5, 7]
    shape[dim] = length
    x = rand(*shape)
    chunk = layer("torch.chunk", {"chunks": chunks, "dim": dim}, outputs=len(sizes))
    check(chunk.run_numpy(x), pieces(x, sizes, dim))


def test_chunk_pieces_must_match_the_outputs():
    chunk = layer("torch.chunk", {"chunks": 4, "dim": 1}, outputs=4)  # 6 makes 3 pieces of 2
    with pytest.raises(ShapeError, match="3 pieces"):
        chunk.output_shapes([(1, 6, 5, 7)])


@pytest.mark.parametrize("params", [{"chunks": 0, "dim": 1}, {"dim": 1}, {"chunks": (2,), "dim": 1}])
def test_chunk_bad_params(params):
    with pytest.raises(LayerError):
        layer("torch.chunk", params, outputs=2)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("split, dim, sizes", [
    (2, 1, [2, 2, 2]),
    (2, 2, [2, 2, 1]),
    (4, -1, [4, 3]),
    ((1, 2, 3), 1, [1, 2, 3]),
    ((5, 0, 2), -1, [5, 0, 2]),
])
def test_split(batch, split, dim, sizes):
    x = rand(batch, 6, 5, 7)
    split_layer = layer("torch.split", {"split_size_or_sections": split, "dim": dim}, outputs=len(sizes))
    check(split_layer.run_numpy(x), pieces(x, sizes, dim))


def test_split_sections_must_sum_to_the_dim():
    split = layer("torch.split", {"split_size_or_sections": (1, 2, 2), "dim": 1}, outputs=3)
    with pytest.raises(ShapeError, match="sums to 5"):
        split.output_shapes([(1, 6, 5, 7)])


@pytest.mark.parametrize("split", [0, -1, (1, 5), (3, -1, 4), 2.0, None])
def test_split_bad_params(split):
    with pytest.raises(LayerError):
        layer("torch.split", {"split_size_or_sections": split, "dim": 1}, outputs=3)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("sections, dim", [(3, 1), (4, 3), (2, -2), (7, -1)])
def test_tensor_split_sections(batch, sections, dim):
    x = rand(batch, 6, 5, 7)
    split = layer("torch.tensor_split", {"sections": sections, "dim": dim}, outputs=sections)
    check(split.run_numpy(x), np.array_split(x, sections, axis=dim))


@pytest.mark.parametrize("indices", [(1, 4), (0, 3, 3), (2, 9)])
def test_tensor_split_indices(indices):
    x = rand(3, 6, 5, 7)
    split = layer("torch.tensor_split", {"indices": indices, "dim": 1}, outputs=len(indices) + 1)
    check(split.run_numpy(x), np.split(x, indices, axis=1))


@pytest.mark.parametrize("indices, cuts", [((-1,), (5,)), ((2, -1), (2, 5)), ((-4, -2), (2, 4)), ((-9,), (0,))])
def test_tensor_split_negative_indices_count_from_the_end(indices, cuts):
    x = rand(3, 6, 5, 7)
    split = layer("torch.tensor_split", {"indices": indices, "dim": 1}, outputs=len(indices) + 1)
    check(split.run_numpy(x), np.split(x, cuts, axis=1))


@pytest.mark.parametrize("params", [{"indices": (4, 1)}, {"indices": (-1, 2)}, {"sections": 0}, {}])
def test_tensor_split_bad_params(params):
    with pytest.raises(LayerError):
        layer("torch.tensor_split", params, outputs=3)


def test_tensor_split_refuses_cuts_out_of_order_at_the_size_given():
    split = layer("torch.tensor_split", {"indices": (4, -3), "dim": 1}, outputs=3)
    with pytest.raises(ShapeError, match=r"indices=\(4, -3\) cut a dim of 6 out of order, at \[4, 3\]"):
        split.output_shapes([(3, 6, 5, 7)])


# ---- squeeze, unsqueeze, identity -------------------------------------------------------------------------
@pytest.mark.parametrize("shape, params, axes", [
    ((3, 1, 5, 1), {"dim": 1}, (1,)),
    ((3, 1, 5, 1), {"dim": -1}, (3,)),
    ((3, 1, 5, 1), {"dim": (1, 3)}, (1, 3)),
    ((3, 1, 5, 1), {"dim": 2}, ()),          # size 5: PyTorch leaves it
    ((3, 1, 5, 1), {}, (1, 3)),
    ((1, 1, 5, 1), {}, (0, 1, 3)),           # no dim: a batch of 1 goes too, as in PyTorch
])
def test_squeeze(shape, params, axes):
    x = rand(*shape)
    squeeze = layer("torch.squeeze", params, recorded=[(2,) + shape[1:]])
    check(squeeze.run_numpy(x), [np.squeeze(x, axis=axes)])


def test_squeeze_dim_out_of_range():
    with pytest.raises(ShapeError):
        layer("torch.squeeze", {"dim": 4}).output_shapes([RECORDED])


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dim", [0, 1, 4, -1, -5])
def test_unsqueeze(batch, dim):
    x = rand(batch, 6, 5, 7)
    check(layer("torch.unsqueeze", {"dim": dim}).run_numpy(x), [np.expand_dims(x, dim)])


def test_unsqueeze_dim_out_of_range():
    with pytest.raises(ShapeError):
        layer("torch.unsqueeze", {"dim": 5}).output_shapes([RECORDED])


@pytest.mark.parametrize("type", ["nn.Identity", "nn.Dropout", "nn.Dropout2d", "F.dropout"])
@pytest.mark.parametrize("batch", BATCHES)
def test_identity_copies_through(type, batch):
    x = rand(batch, 6, 5, 7)
    (out,) = layer(type, {"p": 0.5}).run_numpy(x)
    check([out], [x])
    assert not np.shares_memory(out, x)
