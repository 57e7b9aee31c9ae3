"""kuiper.Int8Linear and its quantization: quantize -> dequantize within half a step of every group's scale, the
reference forward against a float64 product with weights rebuilt group by group, and the numpy backend's blocked
forward (decode and prefill paths, ragged last groups) against the reference."""

import numpy as np
import pytest

import kuiper.cpu  # noqa: F401  (registers the fast layers)
from kuiper.core.errors import LayerError
from kuiper.cpu import int8_linear as fast_int8, threads
from kuiper.layers.int8_linear import GROUP, dequantize, quantize
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(42)


def group_bounds(in_features, group=GROUP):
    return [(k, min(k + group, in_features)) for k in range(0, in_features, group)]


def make_int8(in_features, out_features, bias=True, input_shape=(1, 1), backend="reference", rng=RNG):
    weight = rng.standard_normal((out_features, in_features)).astype(np.float32)
    q, scales = quantize(weight)
    attrs = {"qweight": q, "scales": scales}
    if bias:
        attrs["bias"] = rng.standard_normal(out_features).astype(np.float32)
    params = dict(in_features=in_features, out_features=out_features, bias=bias)
    layer = make_layer("kuiper.Int8Linear", backend=backend, params=params, attrs=attrs, input_shapes=[input_shape])
    return layer, weight, attrs


@pytest.mark.parametrize("in_features", [1, 31, 32, 80, 688])
def test_quantize_is_within_half_a_step(in_features):
    weight = RNG.standard_normal((9, in_features)).astype(np.float32) * RNG.uniform(0.01, 10, (9, 1))
    weight[3, :min(32, in_features)] = 0.0  # an all-zero group: scale 0, q 0
    q, scales = quantize(weight)
    assert q.dtype == np.int8 and scales.dtype == np.float32
    assert scales.shape == (9, len(group_bounds(in_features)))
    rebuilt = dequantize(q, scales)
    for g, (begin, end) in enumerate(group_bounds(in_features)):
        block = weight[:, begin:end].astype(np.float64)
        step = np.abs(block).max(axis=1) / 127  # an independent scale per row of the group
        np.testing.assert_allclose(scales[:, g], step, rtol=1e-6)
        assert np.all(np.abs(q[:, begin:end].astype(np.int32)) <= 127)
        error = np.abs(rebuilt[:, begin:end] - block)
        assert np.all(error <= step[:, None] / 2 * (1 + 1e-5) + 1e-30)
    assert not np.any(q[3, :min(32, in_features)])


@pytest.mark.parametrize("shape", [(80,), (1, 80), (3, 80), (2, 5, 80)])
@pytest.mark.parametrize("bias", [True, False])
def test_reference_is_x_times_the_dequantized_weights(shape, bias):
    layer, _, attrs = make_int8(80, 24, bias, input_shape=shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    q, scales = attrs["qweight"].astype(np.float64), attrs["scales"].astype(np.float64)
    weight = np.empty_like(q)
    for g, (begin, end) in enumerate(group_bounds(80)):
        weight[:, begin:end] = q[:, begin:end] * scales[:, g:g + 1]
    expected = x.astype(np.float64) @ weight.T + (attrs["bias"] if bias else 0)
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("in_features, out_features, shape", [
    (80, 72, (1, 1, 80)),       # one token: decode; a ragged last group of 16
    (576, 300, (1, 3, 576)),    # a few tokens, rows past one block of ROWS
    (688, 200, (1, 20, 688)),   # prefill: many tokens, a ragged last group
    (7, 5, (7,)), (32, 1, (2, 32)),
])
@pytest.mark.parametrize("bias", [True, False])
def test_numpy_backend_matches_the_reference(in_features, out_features, shape, bias):
    rng = np.random.default_rng(in_features)
    reference, _, _ = make_int8(in_features, out_features, bias, shape, "reference", rng)
    fast, _, _ = make_int8(in_features, out_features, bias, shape, "numpy", np.random.default_rng(in_features))
    assert isinstance(fast, fast_int8.Int8Linear)
    x = rng.standard_normal(shape).astype(np.float32)
    expected = reference.run_numpy(x)[0]
    with threads.active():
        actual = fast.run_numpy(x)[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-6 * np.abs(expected).max())


def test_both_numpy_paths_agree_on_the_same_tokens():
    """The token-by-token products (fewer than MANY_TOKENS) and the scaled block's GEMM give the same rows."""
    layer, _, _ = make_int8(100, 140, True, (fast_int8.MANY_TOKENS, 100), "numpy")
    x = RNG.standard_normal((fast_int8.MANY_TOKENS, 100)).astype(np.float32)
    together = layer.run_numpy(x)[0]
    alone = np.concatenate([layer.run_numpy(x[i:i + 1])[0] for i in range(len(x))])
    np.testing.assert_allclose(alone, together, rtol=1e-5, atol=1e-5 * np.abs(together).max())


@pytest.mark.parametrize("attrs, message", [
    ({"qweight": np.zeros((5, 64), np.float32), "scales": np.ones((5, 2), np.float32)}, "expected \\(5, 64\\) int8"),
    ({"qweight": np.zeros((5, 64), np.int8), "scales": np.ones((5, 3), np.float32)}, "@scales"),
    ({"scales": np.ones((5, 2), np.float32)}, "missing weight '@qweight'"),
])
def test_bad_weights(attrs, message):
    with pytest.raises(LayerError, match=message):
        make_layer("kuiper.Int8Linear", params=dict(in_features=64, out_features=5, bias=False), attrs=attrs,
                   input_shapes=[(1, 64)])
