"""Checkpoint of lesson 26: the quantization of exercises/lesson_26.py held to kuiper's own (kuiper.layers.int8_linear)
and to half a step of each group's scale, its int8 matrix-vector product to kuiper's Int8Linear layer, and its
byte count to the layers of a tiny model loaded with quantize="int8"."""

import sys

import numpy as np
import pytest

import kuiper.llm
from kuiper.layers import int8_linear
from kuiper.runtime.backends import make_layer
from lesson_tools import ROOT, exercise

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_tools import write_checkpoint  # noqa: E402

ex = exercise(26)
RNG = np.random.default_rng(26)


def weights(out, inputs):
    w = RNG.standard_normal((out, inputs)).astype(np.float32) * RNG.uniform(0.01, 3, (out, 1)).astype(np.float32)
    w[0, :min(8, inputs)] = 0.0  # a group with zeros (all-zero where the group is at most 8 long)
    return w


@pytest.mark.parametrize("out, inputs, group", [(6, 64, 32), (5, 80, 32), (4, 7, 32), (3, 100, 16), (9, 12, 4)])
def test_quantize_groups_is_kuipers(out, inputs, group):
    w = weights(out, inputs)
    q, scales = ex.quantize_groups(w, group)
    expected_q, expected_scales = int8_linear.quantize(w, group)
    assert np.asarray(q).dtype == np.int8 and np.asarray(q).shape == (out, inputs)
    assert np.asarray(scales).shape == expected_scales.shape
    np.testing.assert_allclose(scales, expected_scales, rtol=1e-6)
    differ = np.asarray(q, np.int32) != expected_q
    assert differ.mean() < 1e-3 and np.all(np.abs(np.asarray(q, np.int32) - expected_q) <= 1)  # ties of rounding


@pytest.mark.parametrize("out, inputs, group", [(6, 64, 32), (5, 80, 32), (3, 100, 16)])
def test_dequantize_groups_is_within_half_a_step(out, inputs, group):
    w = weights(out, inputs)
    q, scales = int8_linear.quantize(w, group)
    got = ex.dequantize_groups(q, scales, group)
    np.testing.assert_allclose(got, int8_linear.dequantize(q, scales, group), rtol=1e-6, atol=0)
    steps = np.repeat(scales, group, axis=1)[:, :inputs]
    assert np.all(np.abs(got - w) <= steps / 2 * (1 + 1e-5))


@pytest.mark.parametrize("out, inputs", [(24, 64), (10, 80), (7, 5)])
def test_int8_matvec_is_the_int8_linear_layer(out, inputs):
    q, scales = int8_linear.quantize(weights(out, inputs))
    x = RNG.standard_normal(inputs).astype(np.float32)
    layer = make_layer("kuiper.Int8Linear", params=dict(in_features=inputs, out_features=out, bias=False),
                       attrs={"qweight": q, "scales": scales}, input_shapes=[(1, inputs)])
    expected = layer.run_numpy(x[None])[0][0]
    got = ex.int8_matvec(q, scales, x)
    assert np.asarray(got).shape == (out,)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_quantized_bytes_counts_a_loaded_models_layers(tmp_path):
    write_checkpoint(tmp_path / "tiny", hidden_size=48, intermediate_size=72)  # 72 inputs: a group of 8 at the end
    lm = kuiper.llm.load(tmp_path / "tiny", quantize="int8", backend="numpy")
    layers = [op.layer for op in lm.graph.order if isinstance(op.layer, int8_linear.Int8Linear)]
    shapes = [layer.qweight.shape for layer in layers]
    assert ex.quantized_bytes(shapes) == sum(layer.qweight.nbytes + layer.scales.nbytes for layer in layers)
    assert ex.quantized_bytes([(1, 64)], group=64) == 64 + 4
