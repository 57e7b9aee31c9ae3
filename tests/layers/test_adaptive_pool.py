"""AdaptiveAvgPool2d / AdaptiveMaxPool2d against a naive per-bin reference."""

import math

import numpy as np
import pytest

import kuiper.layers.adaptive_pool  # noqa: F401  (registers the layers)
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(1)


def reference_adaptive(x, out_h, out_w, kind):
    """Bin (i, j) covers rows floor(i*H/out_h) .. ceil((i+1)*H/out_h) - 1, and likewise for columns.

    For max, the index is that of the first maximum met scanning the bin row by row, as h * W + w.
    """
    height, width = x.shape[-2:]
    out_h, out_w = out_h or height, out_w or width  # 0 stands for None: keep the input size
    values = np.empty(x.shape[:-2] + (out_h, out_w), dtype=np.float64)
    indices = np.empty(values.shape, dtype=np.int64)
    for i in range(out_h):
        for j in range(out_w):
            h0, h1 = math.floor(i * height / out_h), math.ceil((i + 1) * height / out_h)
            w0, w1 = math.floor(j * width / out_w), math.ceil((j + 1) * width / out_w)
            for lead in np.ndindex(x.shape[:-2]):
                plane = x[lead]
                if kind == "avg":
                    values[lead + (i, j)] = plane[h0:h1, w0:w1].mean()
                    continue
                best = (h0, w0)
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        if plane[h, w] > plane[best]:
                            best = (h, w)
                values[lead + (i, j)] = plane[best]
                indices[lead + (i, j)] = best[0] * width + best[1]
    return values, indices


# (input shape, output_size as pnnx writes it: 0 for None)
CASES = [
    ((1, 3, 8, 8), (1, 1)),
    ((3, 2, 7, 9), (1, 1)),
    ((3, 2, 7, 9), (2, 2)),
    ((1, 4, 10, 7), (3, 4)),  # non-divisible: bins overlap
    ((2, 3, 5, 6), (7, 8)),  # more bins than input positions
    ((2, 3, 9, 11), (4, 0)),
    ((2, 3, 9, 11), (0, 5)),
    ((3, 13, 6), (6, 6)),  # unbatched (C, H, W)
]


@pytest.mark.parametrize("type", ["nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d"])
@pytest.mark.parametrize("shape, output_size", CASES)
def test_adaptive_avg_pool_matches_reference(shape, output_size, type):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = make_layer(type, params=dict(output_size=output_size), input_shapes=[shape])
    (out,) = layer.run_numpy(x)
    np.testing.assert_allclose(out, reference_adaptive(x, *output_size, "avg")[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, output_size", [((1, 192, 4), 1), ((2, 3, 10), 4), ((3, 7), 9), ((2, 3, 11), 0)])
def test_adaptive_avg_pool1d_pools_the_last_dim(shape, output_size):
    # transformers' Swin pools its tokens: `nn.AdaptiveAvgPool1d output_size=(1)` on (N, C, L)
    from conftest import assert_every_path_matches_reference

    x = RNG.standard_normal(shape).astype(np.float32)
    params = dict(output_size=[output_size])
    (out,) = make_layer("nn.AdaptiveAvgPool1d", params=params, input_shapes=[shape]).run_numpy(x)
    expected = reference_adaptive(x[..., None, :], 1, output_size, "avg")[0][..., 0, :]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert_every_path_matches_reference("nn.AdaptiveAvgPool1d", x, params=params)
    with pytest.raises(ShapeError, match=r"expects a non-empty \(C, L\) or \(N, C, L\) input, got \(1, 2, 3, 4\)"):
        make_layer("nn.AdaptiveAvgPool1d", params=params, input_shapes=[shape]).output_shapes([(1, 2, 3, 4)])


@pytest.mark.parametrize("shape, output_size", CASES)
def test_adaptive_max_pool_matches_reference(shape, output_size):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = make_layer("nn.AdaptiveMaxPool2d", params=dict(output_size=output_size, return_indices=False),
                       input_shapes=[shape])
    (out,) = layer.run_numpy(x)
    np.testing.assert_array_equal(out, reference_adaptive(x, *output_size, "max")[0])


@pytest.mark.parametrize("shape, output_size", CASES)
def test_adaptive_max_pool_indices_pick_the_first_maximum(shape, output_size):
    # few distinct values, so most bins hold their maximum more than once
    x = RNG.integers(0, 3, size=shape).astype(np.float32)
    layer = make_layer("F.adaptive_max_pool2d", params=dict(output_size=output_size, return_indices=True),
                       input_shapes=[shape], num_outputs=2)
    values, indices = layer.run_numpy(x)
    expected_values, expected_indices = reference_adaptive(x, *output_size, "max")
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


def test_output_shapes_follow_the_input_not_the_recorded_shape():
    layer = make_layer("nn.AdaptiveAvgPool2d", params=dict(output_size=(3, 0)), input_shapes=[(1, 3, 8, 8)])
    assert layer.output_shapes([(5, 3, 17, 4)]) == [(5, 3, 3, 4)]
    assert layer.output_shapes([(3, 2, 9)]) == [(3, 3, 9)]
    layer = make_layer("F.adaptive_max_pool2d", params=dict(output_size=(2, 2), return_indices=True),
                       input_shapes=[(1, 3, 8, 8)], num_outputs=2)
    assert layer.output_shapes([(4, 3, 5, 5)]) == [(4, 3, 2, 2)] * 2
    with pytest.raises(ShapeError):
        layer.output_shapes([(5, 5)])


def test_rejects_bad_parameters():
    with pytest.raises(LayerError, match="output_size"):
        make_layer("nn.AdaptiveAvgPool2d", params=dict(output_size=(2, -1)), input_shapes=[(1, 1, 4, 4)])
    with pytest.raises(LayerError, match="output_size"):
        make_layer("nn.AdaptiveAvgPool2d", params=dict(output_size=(1, 1, 1)), input_shapes=[(1, 1, 4, 4)])
    with pytest.raises(LayerError, match="output"):  # return_indices needs the indices output
        make_layer("F.adaptive_max_pool2d", params=dict(output_size=(2, 2), return_indices=True),
                   input_shapes=[(1, 1, 4, 4)])


@pytest.mark.parametrize("output_size", [(3, 4), (7, 8), (1, 1)])
def test_adaptive_avg_pool_keeps_infinities_as_pytorch_does(output_size):
    """A bin with an inf (and no -inf) has mean inf, not NaN; one with both is NaN, as PyTorch gives."""
    x = RNG.standard_normal((1, 2, 10, 7)).astype(np.float32)
    x[0, 0, 4, 3] = np.inf
    x[0, 1, 2, 2], x[0, 1, 2, 5] = -np.inf, np.inf
    layer = make_layer("nn.AdaptiveAvgPool2d", params=dict(output_size=output_size), input_shapes=[x.shape])
    with np.errstate(invalid="ignore"):  # inf + -inf: numpy warns where PyTorch is silent
        (out,) = layer.run_numpy(x)
        expected = reference_adaptive(x, *output_size, "avg")[0]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert np.isinf(out).any()
