"""Shape layers on OpenCL (ViewLayer's byte copy, cl/copy.cl for permute, transpose, cat, split) against
their numpy forward, on every device, with the odd shapes of test_shape_ops.py.

Data movement must be exact, so every comparison is bit-for-bit (rtol=0), and a few cases run on other
element sizes than float32: the kernel is built per element size and moves bits.
"""

import itertools

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from kuiper.opencl.strided import StridedCopy, contiguous_strides, merge_dims
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(3)
BATCHES = [1, 3]
RECORDED = (2, 6, 5, 7)  # recorded at batch 2, run at batch 1 and 3, as in test_shape_ops.py
DTYPES = [np.float32, np.int64, np.float16, np.uint8]


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(0, np.iinfo(dtype).max, size=shape, dtype=dtype)
    return RNG.standard_normal(shape).astype(dtype)


def layer(type, params=None, recorded=(RECORDED,), outputs=1, backend="reference"):
    return make_layer(type, backend=backend, name="t", params=params or {}, input_shapes=list(recorded),
                      num_outputs=outputs)


def check(rt, shape_layer, *inputs):
    assert_opencl_matches_numpy(shape_layer, rt, *inputs, rtol=0)


# ---- views: one byte copy -----------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("type, params", [
    ("Tensor.reshape", {"shape": (2, 210)}),
    ("Tensor.view", {"shape": (2, -1, 7)}),
    ("Tensor.view", {"shape": (-1, 6, 35)}),
    ("torch.flatten", {"start_dim": 1, "end_dim": 2}),
    ("torch.flatten", {}),
    ("nn.Flatten", {}),
    ("torch.unsqueeze", {"dim": -5}),
    ("torch.unsqueeze", {"dim": 2}),
    ("nn.Identity", {}),
    ("nn.Dropout", {"p": 0.5}),
])
def test_views(cl_runtime, batch, type, params):
    check(cl_runtime, layer(type, params), rand(batch, 6, 5, 7))


@pytest.mark.parametrize("shape, params", [((3, 1, 5, 1), {"dim": -1}), ((1, 1, 5, 1), {})])
def test_squeeze(cl_runtime, shape, params):
    check(cl_runtime, layer("torch.squeeze", params, recorded=[(2,) + shape[1:]]), rand(*shape))


# ---- permute and transpose ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dims", [(0, 2, 3, 1), (0, 3, 1, 2), (0, -1, 1, -2), (3, 2, 1, 0), (0, 1, 2, 3)])
def test_permute(cl_runtime, batch, dims):
    check(cl_runtime, layer("Tensor.permute", {"dims": dims}), rand(batch, 6, 5, 7))


@pytest.mark.parametrize("shape, dims", [
    ((3, 4, 5), (2, 0, 1)),
    ((3, 4, 5), (1, 0, 2)),
    ((2, 3, 1, 5, 7), (0, 3, 1, 4, 2)),   # a size-1 dim in the middle
    ((2, 3, 4, 5, 6), (4, 3, 2, 1, 0)),
    ((2, 3, 2, 4, 3, 2), (5, 0, 4, 1, 3, 2)),  # six dims that do not merge: the kernel's full rank
    ((2, 3, 4500), (1, 0, 2)),            # rows longer than a CPU work-item's run (ROW_SPAN)
    ((1, 4, 4, 7, 7, 24), (0, 5, 1, 3, 2, 4)),  # MaxViT's windows back to channels: rows of 7 written, 24 read
])
@pytest.mark.parametrize("cpu", [True, False])
def test_permute_of_other_ranks(cl_runtime, monkeypatch, shape, dims, cpu):
    monkeypatch.setattr(cl_runtime, "is_cpu", cpu)  # runs along rows (CPUs), or an element per work-item
    check(cl_runtime, layer("Tensor.permute", {"dims": dims}, recorded=[shape]), rand(*shape))


def test_cpus_walk_the_sources_rows_where_the_destinations_are_short():
    # (1, 8, 8, 7, 7, 64) -> dims (0, 5, 1, 3, 2, 4): rows of 7 written, one element a row apart in the source;
    # the source's rows of 64 channels go innermost, the rest in their order, and nothing else moves
    shape, src = (1, 64, 8, 7, 8, 7), contiguous_strides((1, 8, 8, 7, 7, 64))
    dims = merge_dims(shape, contiguous_strides(shape), tuple(src[a] for a in (0, 5, 1, 3, 2, 4)))
    assert dims[-1] == (7, 1, 64)
    assert StridedCopy.rows_first(dims) == dims[1:] + dims[:1] and dims[0] == (64, 3136, 1)
    long_rows = merge_dims((6, 40), (40, 1), (1, 6))
    assert StridedCopy.rows_first(long_rows) == long_rows


@pytest.mark.parametrize("shape, dims", [
    ((1, 96, 7, 8), (0, 2, 3, 1)),   # NCHW -> NHWC in whole tiles: 96 channels, 56 pixels
    ((3, 13, 4, 5), (0, 2, 3, 1)),   # edge tiles on both sides, three batch items
    ((2, 20, 11), (0, 2, 1)),        # NHWC -> NCHW's shape: the last two dims swapped per item
    ((9, 17), (1, 0)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int64])  # int64: the row walk (TILE_BYTES)
def test_cpus_move_a_transpose_as_tiles(cl_runtime, monkeypatch, shape, dims, dtype):
    monkeypatch.setattr(cl_runtime, "is_cpu", True)
    check(cl_runtime, layer("Tensor.permute", {"dims": dims}, recorded=[shape]), rand(*shape, dtype=dtype))


def test_transpose_tiles_take_two_long_dims_contiguous_on_different_sides():
    nchw_to_nhwc = merge_dims((3136, 96), (96, 1), (1, 3136))
    assert StridedCopy.tiles(nchw_to_nhwc) == ((3136, 96, 1), (96, 1, 3136), (1, 0, 0))
    batched = merge_dims((4, 20, 11), (220, 11, 1), (220, 1, 20))
    assert StridedCopy.tiles(batched) == ((20, 11, 1), (11, 1, 20), (4, 220, 220))
    assert StridedCopy.tiles(merge_dims((3136, 3), (3, 1), (1, 3136))) is None  # rows of 3: too short
    assert StridedCopy.tiles(merge_dims((6, 40), (40, 1), (40, 1))) is None     # contiguous on both sides
    assert StridedCopy.tiles(merge_dims((2, 3, 16, 16), (768, 256, 16, 1), (256, 512, 1, 16))) is None  # 2 batch dims


@pytest.mark.parametrize("dtype", DTYPES)
def test_permute_moves_every_element_size(cl_runtime, dtype):
    x = rand(3, 6, 5, 7, dtype=dtype)
    check(cl_runtime, layer("Tensor.permute", {"dims": (0, 2, 3, 1)}), x)


def test_permute_beyond_the_kernel_rank_runs_on_the_host():
    assert not layer("Tensor.permute", {"dims": (6, 5, 4, 3, 2, 1, 0)}, recorded=[(2,) * 7],
                     backend="opencl").supports_opencl


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dim0, dim1", list(itertools.product([0, 1, -2, 3], repeat=2)))
def test_transpose_any_pair(cl_runtime, batch, dim0, dim1):
    check(cl_runtime, layer("torch.transpose", {"dim0": dim0, "dim1": dim1}), rand(batch, 6, 5, 7))


def test_transpose_of_seven_dims_fits_the_kernel(cl_runtime):
    shape = (2, 3, 2, 2, 3, 2, 3)
    check(cl_runtime, layer("torch.transpose", {"dim0": 1, "dim1": -2}, recorded=[shape]), rand(*shape))


# ---- cat ----------------------------------------------------------------------------------------------
def cat_inputs(batch, dim, sizes, dtype=np.float32):
    base = [batch, 6, 5, 7]
    return [rand(*(base[:dim % 4] + [n] + base[dim % 4 + 1:]), dtype=dtype) for n in sizes]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dim, sizes", [
    (0, [1, 2, 3]), (1, [6, 3, 1]), (2, [2, 5, 1]), (3, [7, 7, 1]),
    (-1, [1, 4, 2]), (-2, [3, 1, 5]), (-3, [5, 1, 2, 3]), (-4, [2, 1, 1]),
])
def test_cat(cl_runtime, batch, dim, sizes):
    xs = cat_inputs(batch, dim, sizes)
    check(cl_runtime, layer("torch.cat", {"dim": dim}, recorded=[x.shape for x in xs]), *xs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_moves_every_element_size(cl_runtime, dtype):
    xs = cat_inputs(3, 2, [1, 4, 2], dtype)
    check(cl_runtime, layer("torch.cat", {"dim": 2}, recorded=[x.shape for x in xs]), *xs)


# ---- chunk, split, tensor_split -----------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("length, chunks, dim, pieces", [
    (7, 3, 2, 3), (6, 4, 1, 3), (6, 3, -3, 3), (5, 5, -1, 5), (5, 1, 3, 1),
])
def test_chunk(cl_runtime, batch, length, chunks, dim, pieces):
    shape = [batch, 6, 5, 7]
    shape[dim] = length
    chunk = layer("torch.chunk", {"chunks": chunks, "dim": dim}, outputs=pieces)
    check(cl_runtime, chunk, rand(*shape))


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("split, dim, pieces", [
    (2, 1, 3), (2, 2, 3), (4, -1, 2), ((1, 2, 3), 1, 3), ((5, 0, 2), -1, 3),
])
def test_split(cl_runtime, batch, split, dim, pieces):
    split_layer = layer("torch.split", {"split_size_or_sections": split, "dim": dim}, outputs=pieces)
    check(cl_runtime, split_layer, rand(batch, 6, 5, 7))


def test_split_of_the_batch(cl_runtime):
    split = layer("torch.split", {"split_size_or_sections": (1, 2), "dim": 0}, outputs=2)
    check(cl_runtime, split, rand(3, 6, 5, 7))


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("sections, dim", [(3, 1), (4, 3), (2, -2), (7, -1)])
def test_tensor_split_sections(cl_runtime, batch, sections, dim):
    check(cl_runtime, layer("torch.tensor_split", {"sections": sections, "dim": dim}, outputs=sections),
          rand(batch, 6, 5, 7))


@pytest.mark.parametrize("indices", [(1, 4), (0, 3, 3), (2, 9), (2, -1)])  # empty pieces, from the end
def test_tensor_split_indices(cl_runtime, indices):
    split = layer("torch.tensor_split", {"indices": indices, "dim": 1}, outputs=len(indices) + 1)
    check(cl_runtime, split, rand(3, 6, 5, 7))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_moves_every_element_size(cl_runtime, dtype):
    split = layer("torch.split", {"split_size_or_sections": 2, "dim": 2}, outputs=3)
    check(cl_runtime, split, rand(3, 6, 5, 7, dtype=dtype))


# ---- how copies are laid out --------------------------------------------------------------------------
@pytest.mark.parametrize("shape, dst, src, merged", [
    # cat along dim 0 (or after size-1 dims): one contiguous run, a plain byte copy
    ((1, 3, 35), (210, 35, 1), (105, 35, 1), ((105, 1, 1),)),
    # cat along dim 1 at batch 3: rows of the output, each piece a block
    ((3, 3, 35), (210, 35, 1), (105, 35, 1), ((3, 210, 105), (105, 1, 1))),
    # NCHW -> NHWC: H and W stay neighbours on both sides and merge
    ((2, 5, 7, 6), (210, 42, 6, 1), (210, 7, 1, 35), ((2, 210, 210), (35, 6, 1), (6, 1, 35))),
    ((), (), (), ((1, 1, 1),)),
])
def test_merge_dims(shape, dst, src, merged):
    assert merge_dims(shape, dst, src) == merged
