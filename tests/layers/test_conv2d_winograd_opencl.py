"""Winograd's F(4x4, 3x3) and F(2x2, 3x3) on OpenCL (kuiper/opencl/winograd.py, cl/winograd.cl) against the numpy
forward, every way (a work-item per tile, on CPUs per run of tiles, and F(2x2) with its tiles at the runtime's
precision): odd sizes whose last tiles hang over the output's
edge, runs cut short by a row's end, padding 0 to 2, batches, no bias; the rule; and a fused residual sum and
activation stored by the output transform."""

from types import SimpleNamespace

import numpy as np
import pytest

import kuiper.opencl.winograd as winograd
from conftest import assert_opencl_matches_numpy
from test_conv2d import make_conv
from test_conv2d_opencl import ACTIVATIONS, residual_graph

RNG = np.random.default_rng(23)
WINOGRAD, ROWS, F2 = winograd.FLAT, winograd.ROWS, winograd.STORED


def winograd_variants(rt) -> list:
    return [WINOGRAD, ROWS, F2] if rt.is_cpu else [WINOGRAD, F2]


@pytest.mark.parametrize("cin, cout, padding, shape", [
    (16, 40, 1, (2, 16, 15, 13)),   # tiles over the edge on both axes
    (8, 8, 1, (1, 8, 7, 7)),
    (5, 7, 0, (3, 5, 9, 4)),        # unpadded, batch 3, 2 output columns: one partial tile wide
    (3, 4, 2, (1, 3, 3, 3)),        # more padding than image
    (32, 64, 1, (1, 32, 24, 24)),   # whole tiles only
    (6, 5, 1, (6, 11, 5)),          # unbatched
    (4, 6, 1, (2, 4, 22, 43)),      # rows of 11 tiles: two runs of four and one of three
])
@pytest.mark.parametrize("bias", [True, False])
def test_winograd_matches_numpy(cl_runtime, cin, cout, padding, shape, bias):
    layer, _, _ = make_conv(RNG, in_channels=cin, out_channels=cout, kernel_size=3, padding=padding, bias=bias,
                            input_shape=shape)
    x = RNG.standard_normal(shape, dtype=np.float32)
    for variant in winograd_variants(cl_runtime):
        assert_opencl_matches_numpy(layer, cl_runtime, x, variant=variant)


def test_winograd_in_chunks_of_tile_rows_matches_numpy(cl_runtime, monkeypatch, tmp_path):
    # 3 items of 3 rows of 6 tiles in chunks of 5 and 4 tile rows, the first ending inside item 1: each launch
    # finds its tiles' items and rows; through a fused residual sum, read where each output lies
    monkeypatch.setattr(winograd, "CHUNK_BYTES", 1)
    monkeypatch.setattr(winograd, "MIN_CHUNK_TILES", 5 * 6)
    shape = (3, 4, 9, 21)
    expected, x, graph = residual_graph(tmp_path, cl_runtime, 1, shape, ACTIVATIONS[0])
    conv = graph.order[1].layer.main
    assert conv.winograd.chunk(3 * 3, 6) == 5
    for variant in winograd_variants(cl_runtime):
        conv.variants.use((shape, shape), variant)
        np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-4, atol=1e-4, err_msg=variant)
    layer, _, _ = make_conv(RNG, in_channels=5, out_channels=6, kernel_size=3, padding=1, input_shape=(5, 5, 8, 8))
    monkeypatch.setattr(winograd, "MIN_CHUNK_TILES", 1)
    for variant in winograd_variants(cl_runtime):
        assert_opencl_matches_numpy(layer, cl_runtime, RNG.standard_normal((5, 5, 8, 8), dtype=np.float32),
                                    variant=variant)


@pytest.mark.parametrize("cin, cout, shape, chunks", [
    (16, 32, (1, 16, 27, 9), 2),   # 7 tile rows of 3 tiles in chunks of 4 and 3 rows: a taps table each
    (24, 96, (2, 24, 10, 10), 1),  # 18 tiles, 96 channels: blocks of 32
])
def test_cpus_multiply_few_tiles_by_conv_pixels(cl_runtime, monkeypatch, cin, cout, shape, chunks):
    """Chunks of fewer than PIXELS_MAX_TILES tiles run their a*a products on conv_pixels (CPUs), tiles as its
    pixels, in both float-tile variants."""
    if not cl_runtime.is_cpu:
        pytest.skip("conv_pixels runs on CPUs")
    if chunks > 1:
        monkeypatch.setattr(winograd, "CHUNK_BYTES", 1)
        monkeypatch.setattr(winograd, "MIN_CHUNK_TILES", 4 * 3)
    layer, _, _ = make_conv(RNG, in_channels=cin, out_channels=cout, kernel_size=3, padding=1, input_shape=shape,
                            backend="opencl")
    x = RNG.standard_normal(shape, dtype=np.float32)
    for variant in (WINOGRAD, ROWS):
        assert_opencl_matches_numpy(layer, cl_runtime, x, variant=variant)
        assert layer.winograd.pixels and len(layer.winograd.tap_rows) == chunks


@pytest.mark.parametrize("other", [dict(stride=2), dict(dilation=2), dict(groups=2), dict(kernel_size=5)])
def test_winograd_is_offered_only_for_3x3_stride1_convolutions(cl_runtime, other):
    case = dict(in_channels=4, out_channels=4, kernel_size=3, padding=2, input_shape=(1, 4, 9, 9))
    for options, offered in ((case, True), ({**case, **other}, False)):
        layer, _, _ = make_conv(RNG, **options, backend="opencl")
        layer.build_opencl(cl_runtime)
        candidates = layer.variants.candidates((options["input_shape"],))
        assert all((name in candidates) == offered for name in winograd_variants(cl_runtime))


@pytest.mark.parametrize("cpu, features, mma, winograd_variant", [
    (True, frozenset({"avx2", "avx512f"}), False, WINOGRAD),  # PoCL compiling for AVX-512
    (True, frozenset({"avx2"}), False, ROWS),
    (True, frozenset(), False, ROWS),                          # a compiler that does not say (Intel's runtime)
    (False, frozenset(), False, WINOGRAD),
    (False, frozenset(), True, F2),                            # its GEMM on tensor cores
])
def test_the_rule_takes_winograd_for_enough_tiles_and_channels_on_cpus_and_large_layers_on_gpus(
        cpu, features, mma, winograd_variant, monkeypatch):
    rt = SimpleNamespace(is_cpu=cpu, target_features=features)
    layer, _, _ = make_conv(RNG, in_channels=64, out_channels=64, kernel_size=3, padding=1)
    conv = winograd.WinogradConv.__new__(winograd.WinogradConv)
    conv.rt, conv.layer, conv.stored_gemm = rt, layer, SimpleNamespace(mma=["mma 64x64"] if mma else [])
    small, large = ((1, 64, 56, 56),), ((4, 64, 56, 56),)  # 116 M and 462 M multiply-adds
    if cpu:
        assert conv.preferred(small) == conv.preferred(large) == winograd_variant
        assert conv.preferred(((1, 64, 7, 7),)) is None  # 4 tiles
        assert conv.preferred(((4, 64, 7, 7),)) == conv.preferred(((64, 13, 13),)) == winograd_variant  # 16 tiles
        conv.layer, _, _ = make_conv(RNG, in_channels=winograd.MIN_CPU_CHANNELS - 1, out_channels=64, kernel_size=3)
        assert conv.preferred(((1, winograd.MIN_CPU_CHANNELS - 1, 56, 56),)) is None  # too few input channels
    else:
        assert conv.preferred(small) is None and conv.preferred(large) == winograd_variant
        monkeypatch.setattr(winograd, "MIN_MACS", 1 << 40)
        assert conv.preferred(large) is None


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_output_transform_runs_the_fused_epilogue(cl_runtime, tmp_path, activation):
    shape = (2, 4, 9, 21)  # rows of 6 tiles: a whole run (the vector epilogue) and a short one
    expected, x, graph = residual_graph(tmp_path, cl_runtime, 1, shape, activation)
    fused = graph.order[1].layer
    for variant in winograd_variants(cl_runtime):
        fused.main.variants.use((shape, shape), variant)
        np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-4, atol=1e-4, err_msg=variant)
        # Winograd ran: its input transform, GEMM and output transform (the GEMM split in two on some GPUs)
        assert len(graph.executor.enqueuer.events[graph.order[1].name]) >= 3
