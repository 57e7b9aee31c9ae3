"""Winograd's F(4x4, 3x3) on OpenCL (kuiper/opencl/winograd.py, cl/winograd.cl) against the numpy forward: odd
sizes whose last tiles hang over the output's edge, padding 0 to 2, batches, no bias; the rule; and a fused
residual sum and activation stored by the output transform."""

import numpy as np
import pytest

import kuiper.opencl.winograd as winograd
from conftest import assert_opencl_matches_numpy
from test_conv2d import make_conv
from test_conv2d_opencl import ACTIVATIONS, residual_graph

RNG = np.random.default_rng(23)
WINOGRAD = "winograd F4"


@pytest.mark.parametrize("cin, cout, padding, shape", [
    (16, 40, 1, (2, 16, 15, 13)),   # tiles over the edge on both axes
    (8, 8, 1, (1, 8, 7, 7)),
    (5, 7, 0, (3, 5, 9, 4)),        # unpadded, batch 3, 2 output columns: one partial tile wide
    (3, 4, 2, (1, 3, 3, 3)),        # more padding than image
    (32, 64, 1, (1, 32, 24, 24)),   # whole tiles only
    (6, 5, 1, (6, 11, 5)),          # unbatched
])
@pytest.mark.parametrize("bias", [True, False])
def test_winograd_matches_numpy(cl_runtime, cin, cout, padding, shape, bias):
    layer, _, _ = make_conv(RNG, in_channels=cin, out_channels=cout, kernel_size=3, padding=padding, bias=bias,
                            input_shape=shape)
    x = RNG.standard_normal(shape, dtype=np.float32)
    assert_opencl_matches_numpy(layer, cl_runtime, x, variant=WINOGRAD)


@pytest.mark.parametrize("other", [dict(stride=2), dict(dilation=2), dict(groups=2), dict(kernel_size=5)])
def test_winograd_is_offered_only_for_3x3_stride1_convolutions(cl_runtime, other):
    case = dict(in_channels=4, out_channels=4, kernel_size=3, padding=2, input_shape=(1, 4, 9, 9))
    for options, offered in ((case, True), ({**case, **other}, False)):
        layer, _, _ = make_conv(RNG, **options)
        layer.build_opencl(cl_runtime)
        assert (WINOGRAD in layer.variants.candidates((options["input_shape"],))) == offered


def test_the_rule_takes_winograd_for_enough_tiles_on_cpus_and_large_layers_on_gpus(cl_runtime, monkeypatch):
    layer, _, _ = make_conv(RNG, in_channels=64, out_channels=64, kernel_size=3, padding=1)
    layer.build_opencl(cl_runtime)
    small, large = ((1, 64, 56, 56),), ((4, 64, 56, 56),)  # 116 M and 462 M multiply-adds
    monkeypatch.setattr(cl_runtime, "is_cpu", True)
    assert layer.variants.rule(small) == layer.variants.rule(large) == WINOGRAD
    assert layer.variants.rule(((1, 64, 7, 7),)) != WINOGRAD  # 4 tiles
    assert layer.variants.rule(((4, 64, 7, 7),)) == layer.variants.rule(((64, 13, 13),)) == WINOGRAD  # 16 tiles
    monkeypatch.setattr(cl_runtime, "is_cpu", False)
    assert layer.variants.rule(small) != WINOGRAD and layer.variants.rule(large) == WINOGRAD
    monkeypatch.setattr(winograd, "MIN_MACS", 1 << 40)
    assert layer.variants.rule(large) != WINOGRAD


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_output_transform_runs_the_fused_epilogue(cl_runtime, tmp_path, activation):
    expected, x, graph = residual_graph(tmp_path, cl_runtime, 1, (2, 4, 9, 6), activation)
    fused = graph.order[1].layer
    fused.main.variants.use(((2, 4, 9, 6), (2, 4, 9, 6)), WINOGRAD)
    np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-4, atol=1e-4)
    assert fused.main.winograd.tiles_in.buffer is not None  # Winograd ran: it made its tiles' buffer
