"""nn.Conv2d on OpenCL (im2col + GEMM on CPUs, implicit im2col in the GEMM on GPUs, 1x1 as a plain GEMM,
depthwise direct: cl/conv.cl, cl/gemm.cl) against its numpy forward, on the numpy tests' cases, with batches
split into chunks, with the other device type's kernels (GEMM and depthwise) and with every GEMM variant."""

import numpy as np
import pytest

import kuiper
import kuiper.opencl.conv2d
import kuiper.opencl.conv_pixels
import kuiper.opencl.gemm
from conftest import assert_every_variant_matches_numpy, assert_opencl_matches_numpy, on_opencl, write_model
from kuiper.core.winograd import F4
from kuiper.opencl import spec_of
from test_conv2d import CASES, make_conv

RNG = np.random.default_rng(19)


def check(case, rt, shape=None):
    layer, _, _ = make_conv(RNG, **case)
    x = RNG.standard_normal(shape or case["input_shape"]).astype(np.float32)
    assert_opencl_matches_numpy(layer, rt, x)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_conv_opencl_matches_numpy(cl_runtime, case):
    check(case, cl_runtime)


@pytest.mark.parametrize("case", [
    # ResNet-like: channels past the GEMM blocks, 3x3 pad 1 at stride 1 and 2, a 1x1 stride-2 downsample
    dict(in_channels=16, out_channels=40, kernel_size=3, padding=1, input_shape=(2, 16, 15, 13)),
    dict(in_channels=16, out_channels=24, kernel_size=3, stride=2, padding=1, input_shape=(1, 16, 15, 13)),
    dict(in_channels=16, out_channels=24, kernel_size=1, stride=2, bias=False, input_shape=(1, 16, 15, 13)),
    dict(in_channels=24, out_channels=24, kernel_size=3, padding=1, groups=24, input_shape=(2, 24, 9, 33)),
], ids=["3x3", "3x3 stride2", "1x1 stride2", "depthwise wide"])
def test_larger_convolutions_opencl(cl_runtime, case):
    check(case, cl_runtime)


@pytest.mark.parametrize("width", [0, 10 ** 6], ids=["rows", "pixels"])
def test_im2col_in_rows_and_in_pixels_opencl(cl_runtime, monkeypatch, width):
    """On CPUs im2col gives a work-item a whole output row or one pixel, by the output's width: each way on
    every case, and on a tall image whose pixels' rows im2col_pixels finds by float arithmetic."""
    monkeypatch.setattr(kuiper.opencl.conv2d, "IM2COL_ROW_WIDTH", width)
    for case in CASES.values():
        check(case, cl_runtime)
    check(dict(in_channels=2, out_channels=3, kernel_size=3, padding=1, input_shape=(1, 2, 3001, 21)), cl_runtime)


def test_unbatched_and_chunked_batch_opencl(cl_runtime, monkeypatch):
    case = CASES["stride2 odd batch3 nobias"]
    check(case, cl_runtime, shape=case["input_shape"][1:])
    monkeypatch.setattr(kuiper.opencl.gemm, "COLUMN_BYTES", 3000)  # one item per chunk
    check(case, cl_runtime)
    check(CASES["groups3 stride2"], cl_runtime)


@pytest.mark.parametrize("name", ["groups3 stride2", "pointwise grouped", "7x7 stride2 pad3", "depthwise stride2",
                                  "depthwise multiplier same"])
def test_other_device_kinds_kernels_opencl(cl_runtime, monkeypatch, name):
    monkeypatch.setattr(cl_runtime, "is_cpu", not cl_runtime.is_cpu)
    check(CASES[name], cl_runtime)


@pytest.mark.parametrize("name", ["stride2 odd batch3 nobias", "pointwise grouped"])
def test_every_gemm_variant_opencl(cl_runtime, name):
    """im2col + each gemm_cpu block, implicit im2col + each gemm_gpu tile (for a 1x1 kernel: the input itself, a
    plain product, which gemv computes too; on CPUs, other kernels ungrouped, conv_pixels)."""
    layer, _, _ = make_conv(RNG, **CASES[name])
    x = RNG.standard_normal(CASES[name]["input_shape"], dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    pixels = {"pixels"} if cl_runtime.is_cpu and layer.groups == 1 else set()
    assert {n.split()[0] for n in names} == {"cpu", "gpu"} | ({"gemv"} if layer.pointwise else pixels)


def residual_graph(tmp_path, rt, groups: int, shape: tuple, activation: str):
    """A 3x3 convolution of `groups` groups on `shape` (N, C, H, W), C channels in and out, plus its input, through
    `activation` (its .param line's type and parameters), then flattened (a graph output is never fused): the
    reference backend's output for a random input, the input, and the graph on OpenCL with one fused operator
    `nn.Conv2d+pnnx.Expression+<the activation's type>`."""
    n, c, h, w = shape
    conv = (f"in_channels={c} out_channels={c} kernel_size=(3,3) stride=(1,1) padding=(1,1) dilation=(1,1) "
            f"groups={groups} bias=True @weight=({c},{c // groups},3,3)f32 @bias=({c})f32")
    text = f"""7767517
6 5
pnnx.Input               in0     0 1 x #x=({n},{c},{h},{w})f32
nn.Conv2d                c       1 1 x a {conv} #a=({n},{c},{h},{w})f32
pnnx.Expression          add     2 1 a x s expr=add(@0,@1) #s=({n},{c},{h},{w})f32
{activation.split()[0]:24} act     1 1 s t {" ".join(activation.split()[1:])} #t=({n},{c},{h},{w})f32
torch.flatten            flat    1 1 t y start_dim=1 end_dim=-1 #y=({n},{c * h * w})f32
pnnx.Output              out     1 0 y
"""
    weights = {"c.weight": RNG.standard_normal((c, c // groups, 3, 3)), "c.bias": RNG.standard_normal(c)}
    path = write_model(tmp_path, "residual", text, weights)
    x = RNG.standard_normal(shape, dtype=np.float32)
    graph = kuiper.load(path, backend="opencl", device=spec_of(rt.device))
    assert [op.type for op in graph.order][1] == f"nn.Conv2d+pnnx.Expression+{activation.split()[0]}"
    return kuiper.load(path, backend="reference").forward(x)[0], x, graph


# in rows 11 wide, the CPU kernels run the epilogue on a vector of 8 outputs, then on one of which 3 are outputs
ACTIVATIONS = ["nn.LeakyReLU negative_slope=0.1", "nn.GELU"]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("groups, channels", [(2, 8), (2, 16)])  # 4 and 8 output channels a work-item
def test_grouped_rows_runs_the_fused_epilogue(cl_runtime, monkeypatch, tmp_path, groups, channels, activation):
    monkeypatch.setattr(cl_runtime, "is_cpu", True)  # grouped_rows, whatever this device is
    expected, x, graph = residual_graph(tmp_path, cl_runtime, groups, (2, channels, 9, 11), activation)
    (layer,) = [op.layer.main for op in graph.order if op.type.startswith("nn.Conv2d")]
    assert layer.cl_grouped
    np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("cpu, unpadded", [(True, 2), (True, 0), (False, 2)],
                         ids=["depthwise_rows", "depthwise_padded", "depthwise_conv2d"])
def test_the_depthwise_kernels_run_the_fused_epilogue(cl_runtime, monkeypatch, tmp_path, cpu, unpadded, activation):
    monkeypatch.setattr(cl_runtime, "is_cpu", cpu)
    monkeypatch.setattr(kuiper.opencl.conv2d, "UNPADDED_MAX_STRIDE", unpadded)
    expected, x, graph = residual_graph(tmp_path, cl_runtime, 4, (2, 4, 9, 11), activation)
    np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-4, atol=1e-4)


ROWS_CASES = [(3, 1, 1, 1, 37), (3, 2, 1, 1, 37), (3, 2, 2, 1, 40), (3, 3, 1, 1, 38), (3, 2, 0, 1, 3),
              (5, 1, 2, 1, 30), (5, 2, 2, 1, 45), (3, 1, 2, 2, 29), (5, 1, 4, 2, 7), (3, 2, 1, 1, 18)]


def rows_case(kernel, stride, padding, dilation, width, groups=6):
    return dict(in_channels=6, out_channels=6 if groups == 6 else 8, kernel_size=kernel, stride=stride,
                padding=padding, dilation=dilation, groups=groups, input_shape=(2, 6, 5, width))


@pytest.mark.parametrize("kernel, stride, padding, dilation, width", ROWS_CASES)
@pytest.mark.parametrize("groups", [6, 2], ids=["depthwise", "grouped"])
def test_the_rows_kernels_on_a_padded_copy(cl_runtime, monkeypatch, kernel, stride, padding, dilation, width,
                                           groups):
    # pad_planes splits each padded row into `stride` phases: rows wide enough for its run of whole groups of
    # `stride` inputs and for the columns on either side that it fills one by one (cl/conv.cl)
    monkeypatch.setattr(cl_runtime, "is_cpu", True)  # depthwise_padded or grouped_rows, whatever this device is
    monkeypatch.setattr(kuiper.opencl.conv2d, "UNPADDED_MAX_STRIDE", 0)
    check(rows_case(kernel, stride, padding, dilation, width, groups), cl_runtime)


@pytest.mark.parametrize("kernel, stride, padding, dilation, width", [
    (3, 1, 1, 1, 37), (3, 2, 1, 1, 37), (3, 2, 2, 1, 40), (5, 1, 2, 1, 30), (5, 2, 2, 1, 45), (3, 1, 2, 2, 29),
    (3, 1, 0, 1, 10), (3, 2, 1, 1, 22), (7, 1, 3, 1, 16), (3, 1, 1, 1, 16), (1, 2, 0, 1, 21)])
def test_depthwise_rows_from_the_input(cl_runtime, monkeypatch, kernel, stride, padding, dilation, width):
    # blocks of 8 outputs whose taps all lie inside the input row, the last one slid back, and pixels at either
    # end computed one by one (cl/conv.cl): here however many of them a row leaves
    monkeypatch.setattr(cl_runtime, "is_cpu", True)  # depthwise_rows, whatever this device is
    monkeypatch.setattr(kuiper.opencl.conv2d, "UNPADDED_EDGE_PIXELS", 10 ** 6)
    case = rows_case(kernel, stride, padding, dilation, width)
    layer, _, _ = make_conv(RNG, **case)
    assert on_opencl(layer).unpadded_rows(case["input_shape"][-2:])
    check(case, cl_runtime)


TAPS_CASES = {  # blocks of 32 that slide back at a row's end, 16, 4 and 1: along the padded grid of a phase plane
    "7x7 stride2 pad3": dict(in_channels=3, out_channels=8, kernel_size=7, stride=2, padding=3,
                             input_shape=(2, 3, 9, 70)),
    "dilated grouped": dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, dilation=2, groups=2,
                            input_shape=(1, 4, 9, 40)),
    "5x5 stride4 nobias": dict(in_channels=3, out_channels=13, kernel_size=5, stride=4, padding=1, bias=False,
                               input_shape=(1, 3, 11, 140)),
    "3x5 stride (2,3)": dict(in_channels=5, out_channels=7, kernel_size=(3, 5), stride=(2, 3), padding=(1, 2),
                             input_shape=(3, 5, 6, 105)),
    # along output rows (of TAPS_MIN_ROW pixels or more): 70 here
    "7x7 stride2 rows": dict(in_channels=3, out_channels=8, kernel_size=7, stride=2, padding=3,
                             input_shape=(1, 3, 6, 140)),
    # stride 1: however short the output rows (7 here, 61 grid columns)
    "3x3 at 7x7": dict(in_channels=16, out_channels=20, kernel_size=3, padding=1, input_shape=(2, 16, 7, 7)),
    "1x7 at 7x7 nobias": dict(in_channels=8, out_channels=9, kernel_size=(1, 7), padding=(0, 3), bias=False,
                              input_shape=(1, 8, 7, 7)),
}


@pytest.mark.parametrize("name", TAPS_CASES.keys())
def test_every_taps_variant_opencl(cl_runtime, name):
    """gemm_cpu on pad_planes' copy of the input (the taps variants) for strides, dilation, groups, rows longer
    than a block."""
    layer, _, _ = make_conv(RNG, **TAPS_CASES[name])
    x = RNG.standard_normal(TAPS_CASES[name]["input_shape"], dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    assert {f"cpu 6x{width} taps" for width in (32, 16, 4, 1)} <= set(names)
    if cl_runtime.is_cpu and layer.groups == 1:  # conv_pixels reads the same copy
        assert {"pixels 5x64", "pixels 7x32"} <= set(names)


def test_the_rule_takes_taps_where_windows_overlap_on_cpus(cl_runtime, monkeypatch):
    monkeypatch.setattr(cl_runtime, "is_cpu", True)
    case = dict(TAPS_CASES["7x7 stride2 pad3"])
    layer, _, _ = make_conv(RNG, **case, backend="opencl")
    layer.build_opencl(cl_runtime)
    widest = layer.gemm.cpu_blocks[0][0]
    # output rows of 128 (whole blocks of 32), 112 (7 of 16, not 4 of 32); rows of 35 on the padded grid of a
    # phase plane, 5 rows 38 apart: 187 columns, 6 blocks of 32 or 12 of 16
    for width, expected in [(2 * kuiper.opencl.conv2d.TAPS_MIN_ROW, f"cpu 6x{widest} taps"),
                            (224, "cpu 6x16 taps"), (70, f"cpu 6x{widest} taps")]:
        assert layer.variants.rule(((1, 3, 9, width),)) == expected
    # a 3x3 stride-2 layer at 56x56: a grid of 811 columns, 26 blocks of 32 (832) rather than 51 of 16 (816)
    strided, _, _ = make_conv(RNG, in_channels=4, out_channels=8, kernel_size=3, stride=2, padding=1,
                              backend="opencl")
    strided.build_opencl(cl_runtime)
    assert strided.gemm_dims([(1, 4, 56, 56)])[3] == 811
    assert strided.variants.rule(((1, 4, 56, 56),)) == f"cpu 6x{widest} taps"
    # at stride 1 too: the padded grid of a 7x7 output, 61 columns (2 blocks of 32 or 4 of 16)
    grid, _, _ = make_conv(RNG, **TAPS_CASES["3x3 at 7x7"], backend="opencl")
    grid.build_opencl(cl_runtime)
    assert grid.variants.rule(((2, 16, 7, 7),)) == f"cpu 6x{widest} taps"
    # windows that do not overlap: the column matrix is no bigger than the input, so im2col
    patches, _, _ = make_conv(RNG, in_channels=3, out_channels=8, kernel_size=4, stride=4, backend="opencl")
    patches.build_opencl(cl_runtime)
    assert patches.variants.rule(((1, 3, 224, 224),)) == f"cpu 6x{widest}"


def test_the_rule_takes_conv_pixels_on_cpus(cl_runtime, monkeypatch):
    """conv_pixels where the taps variants would run, K is long enough (MIN_K) and its panels of output channels
    fit (CHANNEL_SLACK), and for 3x3 stride-1 layers where Winograd has fewer than WINOGRAD_TILES tiles: ResNet-18's
    layers at batch 1 but its stem."""
    monkeypatch.setattr(cl_runtime, "is_cpu", True)
    from kuiper.opencl import conv_pixels

    def rule(cin, cout, shape, **conv):
        layer, _, _ = make_conv(RNG, in_channels=cin, out_channels=cout, **{"kernel_size": 3, "padding": 1, **conv},
                                backend="opencl")
        layer.build_opencl(cl_runtime)
        return layer.variants.rule((shape,))

    assert rule(3, 64, (1, 3, 224, 224), kernel_size=7, stride=2, padding=3).endswith(" taps")  # the stem: K = 147
    assert 147 < conv_pixels.MIN_K <= 64 * 9
    assert rule(64, 128, (1, 64, 56, 56), stride=2) == "pixels 5x64"
    assert rule(256, 256, (1, 256, 14, 14)) == "pixels 5x64"  # F(4x4): 16 tiles
    assert F4.tiles(14, 14) == (4, 4) and 2 * 16 >= conv_pixels.WINOGRAD_TILES > 16
    assert rule(256, 256, (2, 256, 14, 14)).startswith("winograd")  # 32 tiles over the batch
    assert rule(128, 128, (1, 128, 28, 28)).startswith("winograd")
    assert rule(32, 96, (1, 32, 20, 20), stride=2) == "pixels 7x32"  # 96 channels: two panels of 64 compute 128
    assert rule(32, 40, (1, 32, 20, 20), stride=2).endswith(" taps")  # two panels of 32 for 40: over CHANNEL_SLACK
    grouped, _, _ = make_conv(RNG, in_channels=256, out_channels=256, kernel_size=3, stride=2, padding=1, groups=2,
                              backend="opencl")  # 128 channels a group: GEMMs, not grouped_rows
    grouped.build_opencl(cl_runtime)
    assert grouped.pixels is None and grouped.variants.rule(((1, 256, 14, 14),)).endswith(" taps")
    monkeypatch.setattr(cl_runtime, "is_cpu", False)
    gpu, _, _ = make_conv(RNG, in_channels=64, out_channels=64, kernel_size=3, stride=2, padding=1, backend="opencl")
    gpu.build_opencl(cl_runtime)
    assert gpu.pixels is None


def test_no_taps_variant_where_offsets_would_pass_32_bits_windows_do_not_overlap_or_the_grid_is_mostly_padding():
    # the taps table holds 32-bit offsets into one group's padded input: 256 channels of 3000 x 3000 pass 2^31
    layer, _, _ = make_conv(RNG, **TAPS_CASES["7x7 stride2 pad3"], backend="opencl")
    assert layer.gemm_dims([(1, 3, 9, 70)])[3] == 4 * 38 + 35  # the grid: 5 rows of 35 outputs, 38 apart
    wide, _, _ = make_conv(RNG, in_channels=256, out_channels=8, kernel_size=3, padding=1, backend="opencl")
    assert wide.gemm_dims([(1, 256, 3000, 3000)])[3] == 0
    wide.pixels = kuiper.opencl.conv_pixels.PixelConv(None, wide)  # conv_pixels reads the same offsets
    assert wide.pixels.candidates([(1, 256, 3000, 3000)]) == [] and wide.pixels.candidates([(1, 256, 300, 300)])
    # the padded grid of DeepLab's atrous 3x3 at dilation 12 on 14x14: 508 columns for 196 pixels; at dilation 2, 250
    atrous, _, _ = make_conv(RNG, in_channels=4, out_channels=8, kernel_size=3, padding=12, dilation=12,
                             backend="opencl")
    assert atrous.gemm_dims([(1, 4, 14, 14)])[3] == 0
    atrous, _, _ = make_conv(RNG, in_channels=4, out_channels=8, kernel_size=3, padding=2, dilation=2,
                             backend="opencl")
    assert atrous.gemm_dims([(1, 4, 14, 14)])[3] == 13 * 18 + 14
    for kernel_size, stride in [(1, 1), (1, 2), (16, 16)]:  # the input is the GEMM's B already; subsampled; ViT's
        patches, _, _ = make_conv(RNG, in_channels=4, out_channels=8, kernel_size=kernel_size, stride=stride,
                                  backend="opencl")
        assert patches.gemm_dims([(1, 4, 32, 200)])[3] == 0


#: the variants that read pad_planes' copy: gemm_cpu's taps, and on CPUs conv_pixels (kuiper/opencl/conv_pixels.py)
PADDED_VARIANTS = ["cpu 6x32 taps", "pixels 5x64", "pixels 7x32"]


def skip_pixels_off_cpus(rt, variant: str) -> None:
    if variant.startswith("pixels") and not rt.is_cpu:
        pytest.skip("conv_pixels runs on CPUs")


@pytest.mark.parametrize("variant", PADDED_VARIANTS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_taps_variant_runs_the_fused_epilogue(cl_runtime, tmp_path, activation, variant):
    # stride 1, short rows: a padded grid of 7 rows of 42 columns, 40 of them outputs, blocks across its rows;
    # the residual is read where each output lies
    skip_pixels_off_cpus(cl_runtime, variant)
    expected, x, graph = residual_graph(tmp_path, cl_runtime, 1, (2, 5, 7, 40), activation)
    (layer,) = [op.layer.main for op in graph.order if op.type.startswith("nn.Conv2d")]
    layer.variants.fix([x.shape, x.shape], variant)
    np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", PADDED_VARIANTS)
def test_the_taps_variant_runs_the_fused_epilogue_along_strided_rows(cl_runtime, tmp_path, variant):
    # stride 2: output rows of 70, blocks at 0, 32 and (slid back) 38 of each; the residual is a second input
    skip_pixels_off_cpus(cl_runtime, variant)
    text = """7767517
7 6
pnnx.Input               in0     0 1 x #x=(2,3,8,140)f32
pnnx.Input               in1     0 1 r #r=(2,6,4,70)f32
nn.Conv2d                c       1 1 x a in_channels=3 out_channels=6 kernel_size=(3,3) stride=(2,2) padding=(1,1) dilation=(1,1) groups=1 bias=True @weight=(6,3,3,3)f32 @bias=(6)f32 #a=(2,6,4,70)f32
pnnx.Expression          add     2 1 a r s expr=add(@0,@1) #s=(2,6,4,70)f32
nn.ReLU                  act     1 1 s t #t=(2,6,4,70)f32
torch.flatten            flat    1 1 t y start_dim=1 end_dim=-1 #y=(2,1680)f32
pnnx.Output              out     1 0 y
"""
    path = write_model(tmp_path, "strided", text, {"c.weight": RNG.standard_normal((6, 3, 3, 3)),
                                                   "c.bias": RNG.standard_normal(6)})
    x, r = RNG.standard_normal((2, 3, 8, 140), dtype=np.float32), RNG.standard_normal((2, 6, 4, 70), dtype=np.float32)
    graph = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device))
    (fused,) = [op.layer for op in graph.order if op.type.startswith("nn.Conv2d")]
    assert fused.main.cl_epilogue.add is not None  # the sum runs in the GEMM's epilogue
    fused.main.variants.fix([x.shape, r.shape], variant)
    expected = kuiper.load(path, backend="reference").forward(x, r)[0]
    np.testing.assert_allclose(graph.forward(x, r)[0], expected, rtol=1e-4, atol=1e-4)
    assert set(fused.main.variants.chosen.values()) == {variant}  # no other shape key came up


def test_weight_rows_padded_for_tensor_cores_serve_every_variant(cl_runtime, monkeypatch):
    """Where tensor cores copy the weights 16 bytes at a time, a GPU's weight rows are padded to 16 bytes (the
    stem's 3 x 7 x 7 = 147 columns): every variant reads them so. As if this device had tensor cores, the
    others here (gemm_mma itself runs on NVIDIA GPUs alone)."""
    monkeypatch.setattr(kuiper.opencl.gemm.Gemm, "_has_mma", lambda self: True)
    layer, _, _ = make_conv(RNG, in_channels=3, out_channels=8, kernel_size=7, stride=2, padding=3,
                            input_shape=(2, 3, 20, 18))
    x = RNG.standard_normal((2, 3, 20, 18)).astype(np.float32)
    twin = on_opencl(layer)
    twin.build_opencl(cl_runtime)
    assert twin.cl_ld == 148  # float32: rows of 4-float multiples
    for name in twin.variants.candidates((x.shape,)):
        if not name.startswith("mma"):
            assert_opencl_matches_numpy(layer, cl_runtime, x, variant=name)
