"""torch.sum / torch.mean / torch.amax / torch.amin on OpenCL (cl/reduce.cl) against their numpy forward, on every device, with both
the one-per-output and the work-group kernel (`cl_paths`): any set of dims, negative ones, keepdim both ways,
batch 1 and 3, all through one program."""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy
from kuiper.opencl.reduce import reduce_layout
from kuiper.runtime.backends import make_layer
from test_softmax_opencl import assert_fp16_close, cl_paths  # noqa: F401  (cl_paths: a fixture)

RNG = np.random.default_rng(13)
DIMS = [None, (0,), (1,), (-1,), (2, 3), (1, -1), (0, 2), (3, 1), (0, 1, 2, 3)]


def reduction(kind, dims, keepdim, shape):
    params = {"keepdim": keepdim} if dims is None else {"dim": list(dims), "keepdim": keepdim}
    return make_layer(f"torch.{kind}", backend="opencl", params=params, input_shapes=[shape])


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("kind", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("shape", [(1, 5, 7, 13), (3, 6, 5, 7), (3, 1, 13, 1), (3, 2, 9, 11)])
def test_every_set_of_dims_matches_numpy(cl_paths, shape, kind, keepdim):
    x = RNG.standard_normal(shape).astype(np.float32)
    for dims in DIMS:
        assert_opencl_matches_numpy(reduction(kind, dims, keepdim, shape), cl_paths, x)


@pytest.mark.parametrize("shape, dims", [
    ((1,), (0,)), ((7,), None), ((13,), (-1,)), ((5, 7), (0,)),
    ((2, 3, 2, 3, 2, 3, 2, 3), (1, 3, 5, 7)),        # 4 kept and 4 reduced dims, the kernel's most
    ((2, 3) * 4 + (2,), (1, 3, 5, 7)),               # 5 kept: beyond the kernel, run on the host
])
@pytest.mark.parametrize("kind", ["sum", "mean"])
def test_odd_ranks_match_numpy(cl_paths, kind, shape, dims):
    x = RNG.standard_normal(shape).astype(np.float32)
    assert_opencl_matches_numpy(reduction(kind, dims, False, shape), cl_paths, x)


def test_reduce_layout_walks_kept_and_reduced_dims_innermost_first():
    kept, kept_strides, reduced, reduced_strides, count = reduce_layout((2, 6, 5, 7), (1, 3))
    assert list(kept) == [5, 2, 1, 1] and list(kept_strides) == [7, 210, 0, 0]
    assert list(reduced) == [7, 6, 1, 1] and list(reduced_strides) == [1, 35, 0, 0]
    assert count == 42
    kept, _, reduced, reduced_strides, count = reduce_layout((2, 6, 5, 7), (2, 3))
    assert list(kept) == [12, 1, 1, 1] and list(reduced) == [35, 1, 1, 1] and count == 35


def test_a_long_mean_stays_accurate(cl_paths):
    """A million elements in one work-item: the compensated sum keeps float32 rounding from piling up."""
    x = (RNG.standard_normal((2, 500_003)) + 1).astype(np.float32)
    layer, expected = reduction("mean", (-1,), False, x.shape), x.astype(np.float64).mean(-1)
    (got,) = layer.run_opencl(cl_paths, x)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert_fp16_close(layer, cl_paths, x, expected.astype(np.float32))


def test_infinities_and_nan_follow_numpy(cl_paths):
    x = np.ones((4, 70), np.float32)
    x[0, 3] = np.inf
    x[1, [2, 5]] = [np.inf, -np.inf]
    x[2, 8] = np.nan
    for kind in ("sum", "amax", "amin"):  # the extremes keep a NaN too, as numpy's do
        layer = reduction(kind, (1,), False, x.shape)
        with np.errstate(invalid="ignore"):
            (expected,) = layer.run_numpy(x)
        (got,) = layer.run_opencl(cl_paths, x)
        np.testing.assert_array_equal(got, expected)
        assert_fp16_close(layer, cl_paths, x, expected)


def test_integer_sums_stay_on_the_host():
    layer = reduction("sum", (1,), False, (2, 3))
    assert layer.supports_opencl
    layer.op.input_operands[0].dtype = "i64"
    assert not layer.supports_opencl
