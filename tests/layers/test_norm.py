"""torch.norm and F.normalize (kuiper/layers/reduce.py) against norms summed element by element in float64, and
every path (OpenCL on every device, with the GPU's work-group kernel too) against the reference."""

import math

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference, assert_opencl_matches_numpy
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer
from test_softmax_opencl import assert_fp16_close, cl_paths  # noqa: F401  (cl_paths: a fixture)

RNG = np.random.default_rng(16)


def textbook_norm(x, p, dims, keepdim):
    """Gather each output's elements by walking every index of x, then apply the definition of the p-norm."""
    axes = set(range(x.ndim)) if dims is None else {d % x.ndim for d in dims}
    groups = {}
    for index in np.ndindex(x.shape):
        kept = tuple(0 if a in axes else i for a, i in enumerate(index))
        groups.setdefault(kept, []).append(abs(float(x[index])))
    out = np.zeros(tuple(1 if a in axes else n for a, n in enumerate(x.shape)))
    for kept, values in groups.items():
        if p == math.inf:
            out[kept] = max(values)
        elif p == -math.inf:
            out[kept] = min(values)
        elif p == 0:
            out[kept] = sum(v != 0 for v in values)
        else:
            # 0 to a negative power is infinite, which makes the norm 0
            out[kept] = sum(v ** p if v or p > 0 else math.inf for v in values) ** (1 / p)
    return out if keepdim else out.reshape([n for a, n in enumerate(x.shape) if a not in axes])


def norm_layer(p, dims, keepdim, shape, backend="reference"):
    params = dict(p=p, keepdim=keepdim) | ({"dim": None} if dims is None else {"dim": list(dims)})
    return make_layer("torch.norm", backend=backend, params=params, input_shapes=[shape])


# pnnx writes p as an int or a float, the infinities as strings
NORMS = [2.0, 2, 1, 3, 0.5, -1.0, 0, "inf", "-inf"]
DIMS = [(-1,), (1, 2), (0,), None]


@pytest.mark.parametrize("p", NORMS)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("keepdim", [True, False])
def test_norm_matches_the_definition(p, dims, keepdim):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    x[0, 1, 2] = 0  # a zero: counted out by p=0, infinite under a negative p
    (out,) = norm_layer(p, dims, keepdim, x.shape).run_numpy(x)
    expected = textbook_norm(x, float(p), dims, keepdim)
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", NORMS)
def test_norm_every_path(p):
    x = RNG.standard_normal((3, 4, 70)).astype(np.float32)
    if 0 < float(p) < 1:  # (sum sqrt|x|)^2 over all 840 elements, about 5e5, is past fp16's largest value, 65504
        x /= 16
    for dims in DIMS:
        assert_every_path_matches_reference("torch.norm", x, params=dict(p=p, dim=dims and list(dims), keepdim=True))


@pytest.mark.parametrize("p", ["inf", 2.0, 3])
def test_norm_opencl_kernels_on_long_rows(cl_paths, p):
    """Rows of 300: on a GPU (or posing as one) sums take the work-group kernel, the infinity norm the other."""
    x = RNG.standard_normal((5, 300)).astype(np.float32)
    assert_opencl_matches_numpy(norm_layer(p, (-1,), False, x.shape), cl_paths, x)


def test_norm_swin_v2_and_fro():
    # swin_v2_t: torch.norm dim=(-1) keepdim=True p=2.0; p='fro' over any dims is the same 2-norm
    x = RNG.standard_normal((4, 3, 16, 32)).astype(np.float32)
    (out,) = norm_layer(2.0, (-1,), True, x.shape).run_numpy(x)
    np.testing.assert_allclose(out, np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True)), rtol=1e-6)
    (fro,) = make_layer("torch.norm", params=dict(p="fro", dim=[2, 3], keepdim=False),
                        input_shapes=[x.shape]).run_numpy(x)
    np.testing.assert_allclose(fro, textbook_norm(x, 2, (2, 3), False), rtol=1e-5)


def test_nan_propagates_through_every_norm(cl_runtime):
    x = np.ones((2, 6), np.float32)
    x[0, 3] = np.nan
    for p in NORMS:
        layer = norm_layer(p, (-1,), False, x.shape, backend="opencl")
        (out,) = layer.run_numpy(x)
        (got,) = layer.run_opencl(cl_runtime, x)
        expected = 6 if p == 0 else np.nan  # nan != 0 counts as nonzero
        assert (out[0] == expected or np.isnan(out[0]) and np.isnan(expected)), p
        # NaN where numpy has it; the finite row within float32 rounding (a GPU's pow and sqrt may differ by an ulp)
        np.testing.assert_allclose(got, out, rtol=1e-6)
        assert_fp16_close(layer, cl_runtime, x, out)


def test_norm_errors():
    with pytest.raises(LayerError, match=r"torch.norm operator 'op': parameter 'p' must be a number, got 'nuc'"):
        make_layer("torch.norm", params=dict(p="nuc", dim=[0, 1], keepdim=False), input_shapes=[(2, 3)])
    with pytest.raises(LayerError, match=r"parameter 'p' must be a number, not nan"):
        make_layer("torch.norm", params=dict(p="nan", dim=[0], keepdim=False), input_shapes=[(2, 3)])
    for p in ("inf", "-inf", -1.0):
        layer = norm_layer(p, (1,), False, (2, 3))
        with pytest.raises(ShapeError, match=rf"torch.norm operator 'op': p={float(p)} has no value over an empty dim: "
                                             r"input \(2, 0\)"):
            layer.output_shapes([(2, 0)])
    with pytest.raises(ShapeError, match="out of range"):
        layer.output_shapes([(2,)])
    # an empty dim has the norm 0 for a finite p, as in PyTorch
    (out,) = norm_layer(2.0, (1,), False, (2, 0)).run_numpy(np.zeros((2, 0), np.float32))
    np.testing.assert_array_equal(out, [0, 0])


# ---- F.normalize ------------------------------------------------------------------------------------------
def textbook_normalize(x, p, dim, eps):
    return x / np.maximum(textbook_norm(x, p, (dim,), True), eps)


@pytest.mark.parametrize("p, dim, eps", [(2.0, -1, 1e-12), (1.0, 1, 1e-6), (3.0, 0, 0.5), ("inf", 1, 1e-12)])
def test_normalize(p, dim, eps):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    x[1, :, 4] = 0  # a vector of zeros stays zeros: divided by eps
    params = dict(p=p, dim=dim, eps=eps)
    (out,) = make_layer("F.normalize", params=params, input_shapes=[x.shape]).run_numpy(x)
    np.testing.assert_allclose(out, textbook_normalize(x, float(p), dim, eps), rtol=1e-5, atol=1e-6)
    assert_every_path_matches_reference("F.normalize", x, params=params)


def test_normalize_errors():
    with pytest.raises(LayerError, match=r"F.normalize operator 'op': parameter 'dim' must be an int, got \[1, 2\]"):
        make_layer("F.normalize", params=dict(p=2.0, dim=[1, 2], eps=1e-12), input_shapes=[(2, 3, 4)])
    layer = make_layer("F.normalize", params=dict(p=2.0, dim=3, eps=1e-12), input_shapes=[(2, 3, 4, 5)])
    with pytest.raises(ShapeError, match="out of range"):
        layer.output_shapes([(2, 3, 4)])
