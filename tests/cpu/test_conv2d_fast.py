"""The fast nn.Conv2d (kuiper/cpu/conv2d.py, kuiper/cpu/depthwise.py): each of its variants, on 1 to 3 threads,
against the reference layer (kuiper/layers/conv2d.py, itself checked against a loop formula in
tests/layers/test_conv2d.py); the epilogue a fused operator hands it; the rule's choice per shape."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference
from cpu_tools import THREADS, running_on

from kuiper.cpu import conv2d, depthwise, threads
from kuiper.core.winograd import F2, F4
from kuiper.layers.fused import Epilogue, EpilogueStep
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(23)

IM2COL, POINTWISE, WINOGRAD = {"im2col"}, {"im2col", "pointwise"}, {"im2col", "winograd_f4", "winograd_f2"}
DEPTHWISE = {"im2col", "depthwise_nchw", "depthwise_hcw", "depthwise_hwc"}
LIVE = {"live taps"}  # offered where some taps read only padding at the input's size (Conv2d.cropped)
PHASES = {"phases"}  # offered at stride 1 where dilation divides the input's size and padding (Conv2d.undilated)

# name: (parameters, input shape, the variants these offer). With every split worth a thread (`splits`), wide
# images are cut into bands of output rows, narrow ones split their channels, batches share out whole images.
CASES = {
    "3x3 pad1 7x5": (dict(in_channels=3, out_channels=5, kernel_size=3, padding=1), (1, 3, 7, 5), WINOGRAD),
    "stride2 batch3 nobias": (dict(in_channels=5, out_channels=7, kernel_size=3, stride=2, padding=1, bias=False),
                              (3, 5, 9, 11), IM2COL),
    "1x1 image 3x3 kernel": (dict(in_channels=4, out_channels=6, kernel_size=3, padding=1), (3, 4, 1, 1),
                             WINOGRAD | LIVE),
    # DeepLab's atrous branches on a small map: the dilation puts every tap but the centre in the padding
    "dilated past the image": (dict(in_channels=5, out_channels=4, kernel_size=3, padding=6, dilation=6),
                               (2, 5, 5, 6), IM2COL | LIVE),
    "dilated past the rows only": (dict(in_channels=5, out_channels=4, kernel_size=3, padding=(5, 1), dilation=(5, 1)),
                                   (1, 5, 4, 7), IM2COL | LIVE),
    # the dead first tap leaves padding 0 above and 1 below: uneven, so nothing is cropped
    "dead taps, uneven padding": (dict(in_channels=3, out_channels=4, kernel_size=3, stride=2, padding=1),
                                  (1, 3, 2, 2), IM2COL),
    "1x1 grouped batch3": (dict(in_channels=6, out_channels=9, kernel_size=1, groups=3), (3, 6, 7, 5), POINTWISE),
    "1x1 wide": (dict(in_channels=8, out_channels=16, kernel_size=1), (1, 8, 20, 40), POINTWISE),
    "1x1 narrow nobias": (dict(in_channels=16, out_channels=12, kernel_size=1, bias=False), (1, 16, 3, 5),
                          POINTWISE),
    "1x1 stride2": (dict(in_channels=5, out_channels=7, kernel_size=1, stride=2), (1, 5, 9, 11), IM2COL),
    "1x1 padded": (dict(in_channels=5, out_channels=7, kernel_size=1, padding=1), (1, 5, 9, 11), IM2COL),
    "same even kernel": (dict(in_channels=3, out_channels=5, kernel_size=(4, 2), padding="same"), (3, 3, 7, 5),
                         IM2COL),
    "same dilated even kernel": (dict(in_channels=3, out_channels=4, kernel_size=(2, 4), padding="same",
                                      dilation=(3, 2)), (1, 3, 9, 11), IM2COL),
    "valid 3x5": (dict(in_channels=3, out_channels=5, kernel_size=(3, 5), padding="valid"), (1, 3, 9, 11), IM2COL),
    "3x3 dilation2": (dict(in_channels=5, out_channels=7, kernel_size=3, padding=2, dilation=2), (1, 5, 9, 11),
                      IM2COL),
    "groups3 stride2": (dict(in_channels=6, out_channels=9, kernel_size=3, stride=2, padding=1, groups=3),
                        (3, 6, 9, 11), IM2COL),
    "3x3 groups2 s1": (dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, groups=2), (1, 4, 12, 30),
                       IM2COL),
    "depthwise stride2": (dict(in_channels=5, out_channels=5, kernel_size=3, stride=2, padding=1, groups=5),
                          (3, 5, 9, 11), DEPTHWISE),
    "depthwise wide": (dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=8), (1, 8, 16, 40),
                       DEPTHWISE),
    "depthwise multiplier same": (dict(in_channels=5, out_channels=10, kernel_size=(3, 2), padding="same",
                                       dilation=2, groups=5, bias=False), (1, 5, 7, 5), DEPTHWISE),
    "single in-channel": (dict(in_channels=1, out_channels=4, kernel_size=3, padding=1), (3, 1, 7, 5), WINOGRAD),
    "7x7 stride2 pad3 wide": (dict(in_channels=3, out_channels=8, kernel_size=7, stride=2, padding=3),
                              (1, 3, 32, 48), IM2COL),
    "kernel>stride asymmetric": (dict(in_channels=5, out_channels=7, kernel_size=5, stride=(2, 1), padding=(2, 0)),
                                 (3, 5, 9, 11), IM2COL),
    "kernel<stride": (dict(in_channels=3, out_channels=5, kernel_size=2, stride=3), (1, 3, 7, 5), IM2COL),
    "unbatched stride2": (dict(in_channels=5, out_channels=7, kernel_size=3, stride=2, padding=1), (5, 9, 11),
                          IM2COL),
    "unbatched 3x3": (dict(in_channels=5, out_channels=7, kernel_size=3, padding=1), (5, 9, 11), WINOGRAD),
    # 3x3 stride 1 at sizes whose rule is F(4x4), F(2x2) and im2col; overhanging and whole tiles; wide and narrow
    "3x3 F4 overhanging": (dict(in_channels=6, out_channels=5, kernel_size=3, padding=1), (1, 6, 23, 30),
                           WINOGRAD),
    "3x3 F4 valid wide nobias": (dict(in_channels=5, out_channels=6, kernel_size=3, padding="valid", bias=False),
                                 (1, 5, 14, 50), WINOGRAD),
    "3x3 F2 batch3": (dict(in_channels=4, out_channels=7, kernel_size=3, padding=1), (3, 4, 12, 12), WINOGRAD),
    "3x3 F2 narrow": (dict(in_channels=6, out_channels=5, kernel_size=3, padding=1), (1, 6, 40, 3), WINOGRAD),
    "3x3 im2col 7x7": (dict(in_channels=8, out_channels=8, kernel_size=3, padding=1), (1, 8, 7, 7), WINOGRAD),
    "3x3 asymmetric padding": (dict(in_channels=5, out_channels=7, kernel_size=3, padding=(2, 0)), (1, 5, 9, 11),
                               WINOGRAD),
    "3x3 same batch3": (dict(in_channels=5, out_channels=5, kernel_size=3, padding="same"), (3, 5, 6, 7), WINOGRAD),
    # depthwise (one input channel per group): strides, paddings, dilations and kernels as MobileNets and
    # EfficientNets have them and beyond; odd sizes, so that strided views end short of the padded edges
    "depthwise 3x3 unpadded odd": (dict(in_channels=6, out_channels=6, kernel_size=3, groups=6), (2, 6, 9, 13),
                                   DEPTHWISE),
    "depthwise 3x3 pad2 nobias": (dict(in_channels=7, out_channels=7, kernel_size=3, padding=2, groups=7,
                                       bias=False), (1, 7, 11, 5), DEPTHWISE),
    "depthwise 5x5 pad2 batch3": (dict(in_channels=6, out_channels=6, kernel_size=5, padding=2, groups=6),
                                  (3, 6, 7, 9), DEPTHWISE),
    "depthwise 5x5 stride2 odd": (dict(in_channels=6, out_channels=6, kernel_size=5, stride=2, padding=2, groups=6),
                                  (1, 6, 15, 13), DEPTHWISE),
    "depthwise 3x3 stride2 unpadded": (dict(in_channels=4, out_channels=4, kernel_size=3, stride=2, groups=4,
                                            bias=False), (2, 4, 10, 9), DEPTHWISE),
    "depthwise 3x3 dilation2": (dict(in_channels=5, out_channels=5, kernel_size=3, padding=2, dilation=2,
                                     groups=5), (1, 5, 13, 11), DEPTHWISE),
    "depthwise same even kernel": (dict(in_channels=6, out_channels=6, kernel_size=(4, 2), padding="same",
                                        groups=6), (2, 6, 9, 8), DEPTHWISE),
    "depthwise same even dilated nobias": (dict(in_channels=4, out_channels=4, kernel_size=(2, 4), padding="same",
                                                dilation=(3, 2), groups=4, bias=False), (1, 4, 10, 11), DEPTHWISE),
    "depthwise 7x7 pad3": (dict(in_channels=6, out_channels=6, kernel_size=7, padding=3, groups=6), (1, 6, 12, 10),
                           DEPTHWISE),
    "depthwise 7x7 on a smaller image": (dict(in_channels=4, out_channels=4, kernel_size=7, padding=3, groups=4),
                                         (1, 4, 3, 5), DEPTHWISE | LIVE),
    # strides and dilations whose kx fall in several column phases, unevenly (kuiper/cpu/depthwise.py)
    "depthwise stride3 dilation2": (dict(in_channels=6, out_channels=6, kernel_size=3, stride=3, padding=2,
                                         dilation=2, groups=6), (1, 6, 13, 14), DEPTHWISE),
    "depthwise 5x5 stride2 dilation3": (dict(in_channels=6, out_channels=6, kernel_size=5, stride=2, padding=4,
                                             dilation=(1, 3), groups=6), (2, 6, 17, 19), DEPTHWISE),
    "depthwise strides (2, 1) (1, 2)": (dict(in_channels=4, out_channels=4, kernel_size=(3, 5), stride=(2, 1),
                                             padding=(0, 2), dilation=(1, 2), groups=4), (1, 4, 11, 9), DEPTHWISE),
    "depthwise stride (1, 2) asymmetric padding": (dict(in_channels=4, out_channels=4, kernel_size=3, stride=(1, 2),
                                                        padding=(1, 3), dilation=(2, 1), groups=4),
                                                   (2, 4, 5, 6), DEPTHWISE),
    "depthwise multiplier 3 stride2": (dict(in_channels=4, out_channels=12, kernel_size=3, stride=2, padding=1,
                                            groups=4), (2, 4, 9, 7), DEPTHWISE),
    "depthwise 1x1 image": (dict(in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=4), (3, 4, 1, 1),
                            DEPTHWISE | LIVE),
    "depthwise unbatched": (dict(in_channels=5, out_channels=5, kernel_size=3, stride=2, padding=1, groups=5),
                            (5, 8, 9), DEPTHWISE),
    # OpenCL on CPUs: grouped_rows, 4 and 8 output channels a work-item, strided and dilated
    "grouped 4 outputs a group": (dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=2),
                                  (2, 8, 9, 11), IM2COL),
    "grouped 8 outputs stride2 dilated": (dict(in_channels=6, out_channels=16, kernel_size=3, stride=2, padding=2,
                                               dilation=2, groups=2), (1, 6, 13, 10), IM2COL),
    "grouped 2 channels a group": (dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=3),
                                   (1, 6, 7, 8), IM2COL),
    # dilated at stride 1 over the mosaic of the input's phases: as FCN's atrous ResNet layers, unequal dilations
    # and paddings, none, a grouped and a depthwise kernel
    "3x3 dilation2 phases": (dict(in_channels=5, out_channels=7, kernel_size=3, padding=2, dilation=2),
                             (1, 5, 12, 10), IM2COL | PHASES),
    "3x3 dilation (4, 2) asymmetric batch2": (dict(in_channels=4, out_channels=6, kernel_size=3, padding=(4, 2),
                                                   dilation=(4, 2)), (2, 4, 16, 14), IM2COL | PHASES),
    "dilated 3x5 unpadded nobias": (dict(in_channels=3, out_channels=5, kernel_size=(3, 5), dilation=3, bias=False),
                                    (1, 3, 12, 18), IM2COL | PHASES),
    "dilated grouped unbatched": (dict(in_channels=4, out_channels=6, kernel_size=3, padding=2, dilation=2,
                                       groups=2), (4, 8, 6), IM2COL | PHASES),
    "depthwise dilated phases": (dict(in_channels=5, out_channels=5, kernel_size=3, padding=2, dilation=2,
                                      groups=5), (1, 5, 12, 10), DEPTHWISE | PHASES),
}


def conv_params(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
    """Every parameter of nn.Conv2d, and random weights for them."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    params = dict(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                  padding=padding, dilation=dilation, groups=groups, bias=bias, padding_mode="zeros")
    attrs = {"weight": RNG.standard_normal((out_channels, in_channels // groups, kh, kw)).astype(np.float32)}
    if bias:
        attrs["bias"] = RNG.standard_normal(out_channels).astype(np.float32)
    return dict(params=params, attrs=attrs)


@pytest.fixture(autouse=True)
def splits(monkeypatch):
    """Every split of the work over kuiper's threads worth making, however little work it is: the shapes above
    then decide between bands and channels, as the sizes of real images do."""
    monkeypatch.setattr(threads, "MIN_MACS", 1)


@pytest.fixture(params=["budget", "tiny budget", "large weights"])
def budgets(request, monkeypatch):
    """The work buffers' real sizes, or sizes small enough to cut each image into bands of 1 to 5 rows (of
    output pixels, of tiles), the last band often shorter; or Winograd's weights counted as too large to be
    read by every thread, so that each band's input channels and then its output channels are split."""
    if request.param == "tiny budget":
        monkeypatch.setattr(conv2d, "COLUMN_BYTES", 2500)
        monkeypatch.setattr(conv2d, "WINOGRAD_BYTES", 6100)
        monkeypatch.setattr(depthwise, "BAND_BYTES", 2000)  # NCHW: a channel at a time, in bands; HCW: rows
    if request.param == "large weights":
        monkeypatch.setattr(conv2d, "WINOGRAD_SHARED_WEIGHTS", 0)
        monkeypatch.setattr(conv2d, "WINOGRAD_SPLIT_CHANNELS", 1)


@pytest.mark.parametrize("name", CASES)
def test_every_variant_matches_reference(name):
    params, shape, offered = CASES[name]
    x = RNG.standard_normal(shape).astype(np.float32)
    assert set(assert_every_path_matches_reference("nn.Conv2d", x, **conv_params(**params))) == offered


@pytest.mark.parametrize("name", ["stride2 batch3 nobias", "same even kernel", "groups3 stride2",
                                  "kernel>stride asymmetric", "3x3 F2 batch3", "3x3 F4 overhanging",
                                  "depthwise wide", "depthwise 5x5 pad2 batch3", "depthwise 5x5 stride2 odd",
                                  "depthwise same even dilated nobias", "depthwise 5x5 stride2 dilation3",
                                  "depthwise multiplier 3 stride2", "3x3 dilation (4, 2) asymmetric batch2"])
def test_every_variant_in_small_bands(budgets, name):
    test_every_variant_matches_reference(name)


# name: (parameters, input shape, the variants these offer): whole and overhanging tiles, bands and channel
# splits (see `splits`)
EPILOGUE_CASES = {
    "narrow overhanging": (dict(in_channels=6, out_channels=5, kernel_size=3, padding=1), (1, 6, 22, 7), WINOGRAD),
    "whole tiles batch2": (dict(in_channels=5, out_channels=6, kernel_size=3, padding=1), (2, 5, 16, 24), WINOGRAD),
    "unbatched nobias": (dict(in_channels=5, out_channels=7, kernel_size=3, padding=1, bias=False), (5, 9, 11),
                         WINOGRAD),
    "1x1": (dict(in_channels=8, out_channels=6, kernel_size=1), (1, 8, 6, 10), POINTWISE),
    "stride2 batch3": (dict(in_channels=5, out_channels=7, kernel_size=3, stride=2, padding=1), (3, 5, 9, 11),
                       IM2COL),
    "depthwise": (dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=6), (2, 6, 9, 11),
                  DEPTHWISE),
    "depthwise 5x5 stride2 unbatched": (dict(in_channels=6, out_channels=6, kernel_size=5, stride=2, padding=2,
                                             groups=6), (6, 13, 11), DEPTHWISE),
    "dilated batch2": (dict(in_channels=5, out_channels=6, kernel_size=3, padding=2, dilation=2), (2, 5, 10, 12),
                       IM2COL | PHASES),
}


@pytest.mark.parametrize("activation", ["nn.ReLU", "nn.ReLU6"])
@pytest.mark.parametrize("name", EPILOGUE_CASES)
def test_epilogue_adds_then_activates_every_part(budgets, name, activation):
    """An operator fused from conv -> add -> relu (or relu6, as MobileNets have it): each variant adds the other
    tensor to each part of its output, then applies the activation, whichever way the parts are cut."""
    params, shape, offered = EPILOGUE_CASES[name]
    options = dict(input_shapes=[shape], **conv_params(**params))
    layer = make_layer("nn.Conv2d", backend="numpy", **options)
    x = RNG.standard_normal(shape).astype(np.float32)
    conv = make_layer("nn.Conv2d", **options).run_numpy(x)[0]
    residual = RNG.standard_normal(conv.shape).astype(np.float32)
    expected = np.clip(conv + residual, 0, 6 if activation == "nn.ReLU6" else None)

    add = make_layer("pnnx.Expression", params=dict(expr="add(@0,@1)"), input_shapes=[conv.shape] * 2)
    relu = make_layer(activation, input_shapes=[conv.shape])
    epilogue = Epilogue([EpilogueStep(add, extra=1), EpilogueStep(relu)], [x, residual])
    shapes = [x.shape, residual.shape]  # the fused operator's inputs
    assert set(layer.variants.candidates(shapes)) == offered
    for variant in offered:
        layer.variants.fix(shapes, variant)
        for count in THREADS:
            out = np.full(conv.shape, np.nan, np.float32)
            with running_on(count):
                layer.forward_epilogue([x], [out], epilogue)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max(),
                                       err_msg=f"variant {variant} on {count} thread(s)")


def make_fast(params, shape):
    return make_layer("nn.Conv2d", backend="numpy", input_shapes=[shape], **conv_params(**params))


def test_rule_by_output_size():
    """F(4x4) where the output has enough 4x4 tiles, F(2x2) where it has enough 2x2 ones, else im2col."""
    layer = make_fast(dict(in_channels=8, out_channels=8, kernel_size=3, padding=1), (1, 8, 56, 56))
    assert [layer.variants.rule([(1, 8, s, s)]) for s in (56, 28, 23, 14, 11, 7)] == \
        ["winograd_f4"] * 3 + ["winograd_f2"] * 2 + ["im2col"]
    assert layer.variants.rule([(8, 23, 23)]) == "winograd_f4"  # unbatched: the same image
    pointwise = make_fast(dict(in_channels=8, out_channels=8, kernel_size=1), (1, 8, 7, 7))
    assert pointwise.variants.rule([(1, 8, 56, 56)]) == "pointwise"


def test_phases_rule():
    """A dilated 3x3 convolution (FCN-ResNet50's) runs its phases where their mosaic gets Winograd, and im2col
    where the mosaic is too small for it or the phases do not tile the input; depthwise ones keep their rule."""
    def rule(size, dilation, groups=1):
        layer = make_fast(dict(in_channels=8, out_channels=8, kernel_size=3, padding=dilation, dilation=dilation,
                               groups=groups), (1, 8, size, size))
        return layer.variants.rule([(1, 8, size, size)])
    assert [rule(28, 2), rule(28, 4), rule(27, 2), rule(6, 2)] == ["phases", "phases", "im2col", "im2col"]
    assert rule(28, 2, groups=8) == "depthwise_nchw"


def test_phases_buffers_follow_shape_changes():
    """The mosaic's frames of zeros stay zeros across input sizes, and what the variant keeps (its own buffers and
    its undilated convolution's) is at most what workspace_bytes says."""
    options = conv_params(in_channels=5, out_channels=6, kernel_size=3, padding=2, dilation=2)
    layer = make_layer("nn.Conv2d", backend="numpy", input_shapes=[(1, 5, 12, 12)], **options)
    reference = make_layer("nn.Conv2d", input_shapes=[(1, 5, 12, 12)], **options)
    for shape in [(1, 5, 12, 12), (1, 5, 10, 10), (2, 5, 12, 10), (1, 5, 12, 12), (5, 10, 10)]:
        layer.variants.fix([shape], "phases")
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(layer.run_numpy(x)[0], reference.run_numpy(x)[0], rtol=1e-4, atol=1e-4)
    fresh = make_layer("nn.Conv2d", backend="numpy", input_shapes=[(1, 5, 12, 12)], **options)
    fresh.variants.fix([(1, 5, 28, 28)], "phases")
    fresh.run_numpy(RNG.standard_normal((1, 5, 28, 28)).astype(np.float32))
    kept = [b.nbytes for conv in (fresh, fresh.undilated_conv) for b in conv.scratch._buffers.values()]
    assert 0 < sum(kept) <= fresh.workspace_bytes([(1, 5, 28, 28)])


def test_depthwise_rule():
    """Depthwise convolutions of MobileNets and EfficientNets: depthwise_nchw on outputs of 28x28 and larger,
    depthwise_hwc on smaller ones of 96 channels or more, else depthwise_hcw; strided, depthwise_hwc on 96 channels
    or more for outputs of 14x14 and smaller, or 28x28 with 5x5 kernels; else depthwise_hcw for 5x5 kernels,
    outputs of 56x56 and larger or 128 channels and more, im2col for 3x3 kernels on fewer channels."""
    def rule(channels, size, kernel, stride):
        layer = make_fast(dict(in_channels=channels, out_channels=channels, kernel_size=kernel, stride=stride,
                               padding=kernel // 2, groups=channels), (1, channels, size, size))
        return layer.variants.rule([(1, channels, size, size)])
    assert [rule(c, size, 3, 1) for c, size in [(32, 112), (144, 56), (192, 28), (384, 14), (960, 7), (48, 14)]] \
        == ["depthwise_nchw"] * 3 + ["depthwise_hwc"] * 2 + ["depthwise_hcw"]
    assert [rule(c, size, k, 1) for c, size, k in [(96, 56, 7), (120, 28, 5), (480, 14, 5), (768, 7, 7)]] == \
        ["depthwise_nchw"] * 2 + ["depthwise_hwc"] * 2
    assert [rule(c, size, 3, 2) for c, size in [(96, 112), (144, 56), (192, 28), (576, 14), (96, 28), (72, 56),
                                                (64, 14)]] == \
        ["depthwise_hcw"] * 2 + ["depthwise_hwc"] * 3 + ["im2col"] * 2
    assert [rule(c, size, 5, 2) for c, size in [(72, 56), (144, 56), (672, 14), (96, 224)]] == \
        ["depthwise_hcw", "depthwise_hwc", "depthwise_hwc", "depthwise_hcw"]
    # with a channel multiplier im2col's columns serve several output channels each: it stays
    multiplier = make_fast(dict(in_channels=8, out_channels=16, kernel_size=3, padding=1, groups=8), (1, 8, 56, 56))
    assert multiplier.variants.rule([(1, 8, 56, 56)]) == "im2col"
    # two input channels a group is no depthwise convolution: a stack of GEMMs
    grouped = make_fast(dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=4), (1, 8, 28, 28))
    assert grouped.variants.candidates([(1, 8, 28, 28)]) == ["im2col"]


@pytest.mark.parametrize("name", ["depthwise wide", "depthwise 5x5 pad2 batch3", "depthwise 5x5 stride2 dilation3",
                                  "depthwise multiplier 3 stride2", "depthwise unbatched"])
@pytest.mark.parametrize("variant", depthwise.LAYOUTS)
def test_depthwise_keeps_its_workspace(budgets, name, variant):
    """What the depthwise variants keep between forwards is what workspace_bytes says (the layer's, for the
    variant its rule picks), at 1-3 threads, in whole images or small bands."""
    params, shape, _ = CASES[name]
    x = RNG.standard_normal(shape).astype(np.float32)
    batched = (1,) * (4 - len(shape)) + shape
    for count in THREADS:
        layer = make_fast(params, shape)
        layer.variants.fix([shape], variant)
        with running_on(count):
            layer.run_numpy(x)
            layer.run_numpy(x)
            expected = layer.depthwise.workspace_bytes(variant, batched)
            if layer.variants.rule([shape]) == variant:
                assert layer.workspace_bytes([shape]) == expected
        kept = sum(b.nbytes for b in layer.scratch._buffers.values())
        assert kept == expected, f"{count} thread(s)"


@pytest.mark.parametrize("name, variant", [("3x3 F4 overhanging", "winograd_f4"), ("3x3 F2 batch3", "winograd_f2")])
def test_winograd_keeps_its_workspace(budgets, name, variant):
    """What Winograd keeps between forwards is what workspace_bytes says, at 1-3 threads, in whole images or
    small bands, split by bands or by channels."""
    params, shape, _ = CASES[name]
    x = RNG.standard_normal(shape).astype(np.float32)
    for count in THREADS:
        layer = make_fast(params, shape)
        assert layer.variants.fix([shape]) == variant
        with running_on(count):
            layer.run_numpy(x)
            layer.run_numpy(x)
            expected = layer.workspace_bytes([shape])
        assert sum(b.nbytes for b in layer.scratch._buffers.values()) == expected, f"{count} thread(s)"


@pytest.mark.parametrize("change", [dict(stride=2), dict(dilation=2), dict(groups=2), dict(kernel_size=(3, 1))])
def test_winograd_only_for_3x3_stride1_undilated_ungrouped(change):
    params = {**dict(in_channels=4, out_channels=4, kernel_size=3, padding=1), **change}
    layer = make_fast(params, (1, 4, 56, 56))
    assert layer.variants.candidates([(1, 4, 56, 56)]) == ["im2col"]
    assert layer.variants.rule([(1, 4, 56, 56)]) == "im2col"


def test_winograd_weights_are_made_when_the_shape_is_fixed(monkeypatch):
    """Variants.fix builds the chosen variant, as the graph does when it plans a shape; forwards reuse it."""
    made = []

    def counted(f):
        transform = f.transform_kernel

        def counting(weight):
            made.append(f.m)
            return transform(weight)
        return counting
    for f in (F4, F2):
        monkeypatch.setattr(f, "transform_kernel", counted(f))
    params, shape, _ = CASES["3x3 F4 overhanging"]
    layer = make_fast(params, shape)
    assert made == []
    assert layer.variants.fix([shape]) == "winograd_f4" and made == [4]
    x = RNG.standard_normal(shape).astype(np.float32)
    layer.run_numpy(x)
    layer.run_numpy(x)
    assert made == [4]


@pytest.mark.parametrize("name", ["winograd_f4", "winograd_f2"])
@pytest.mark.parametrize("channels, size", [(64, 28), (256, 14)])
def test_winograd_accuracy_at_resnet_widths(name, channels, size):
    """Hundreds of channels summed in the transformed domain: the float32 error stays well inside the tolerance."""
    options = conv_params(channels, channels, 3, padding=1)
    shape = (1, channels, size, size)
    layer = make_layer("nn.Conv2d", backend="numpy", input_shapes=[shape], **options)
    layer.variants.fix([shape], name)
    x = RNG.standard_normal(shape).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    weight = options["attrs"]["weight"].astype(np.float64)
    expected = options["attrs"]["bias"].reshape(-1, 1, 1).astype(np.float64)
    for i in range(3):  # the definition one tap at a time over whole images: a loop over pixels is too slow here
        for j in range(3):
            expected = expected + np.einsum("oc,nchw->nohw", weight[:, :, i, j], padded[:, :, i:i + size, j:j + size])
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("name", ["im2col", "winograd_f4", "winograd_f2"])
def test_buffers_follow_shape_changes(name):
    """One layer over several shapes, kept buffers and all: 8x8 then 7x7 need as many tiles, and the padding
    the 7x7 image reads must still be zeros."""
    params = dict(in_channels=5, out_channels=6, kernel_size=3, padding=1)
    options = conv_params(**params)
    layer = make_layer("nn.Conv2d", backend="numpy", input_shapes=[(1, 5, 8, 8)], **options)
    reference = make_layer("nn.Conv2d", input_shapes=[(1, 5, 8, 8)], **options)
    for shape in [(1, 5, 8, 8), (1, 5, 7, 7), (3, 5, 8, 7), (1, 5, 8, 8), (5, 7, 7), (1, 5, 7, 7)]:
        layer.variants.fix([shape], name)
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(layer.run_numpy(x)[0], reference.run_numpy(x)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", depthwise.LAYOUTS)
def test_depthwise_buffers_follow_shape_changes(budgets, name):
    """The depthwise variants over several shapes: at stride 2, 10 and 9 columns make outputs as wide, and
    buffers as large, but the 9-column image's last column is padding, which must read as zeros."""
    options = conv_params(in_channels=6, out_channels=6, kernel_size=3, stride=2, padding=1, groups=6)
    layer = make_layer("nn.Conv2d", backend="numpy", input_shapes=[(1, 6, 10, 10)], **options)
    reference = make_layer("nn.Conv2d", input_shapes=[(1, 6, 10, 10)], **options)
    for shape in [(1, 6, 10, 10), (1, 6, 9, 9), (2, 6, 10, 9), (1, 6, 10, 10), (6, 9, 10), (1, 6, 9, 9)]:
        layer.variants.fix([shape], name)
        x = RNG.standard_normal(shape).astype(np.float32)
        for count in THREADS:
            with running_on(count):
                got = layer.run_numpy(x)[0]
            np.testing.assert_allclose(got, reference.run_numpy(x)[0], rtol=1e-4, atol=1e-4,
                                       err_msg=f"{shape} on {count} thread(s)")


def test_the_rule_switches_variants_on_one_layer():
    """Image sizes whose rule is F(4x4), F(2x2) and im2col, back and forth, nothing fixed beforehand."""
    options = conv_params(3, 4, 3, padding=1)
    layer = make_layer("nn.Conv2d", backend="numpy", input_shapes=[(1, 3, 24, 24)], **options)
    reference = make_layer("nn.Conv2d", input_shapes=[(1, 3, 24, 24)], **options)
    for size, name in [(24, "winograd_f4"), (14, "winograd_f2"), (7, "im2col"), (22, "winograd_f4"),
                       (24, "winograd_f4"), (12, "winograd_f2")]:
        x = RNG.standard_normal((1, 3, size, size)).astype(np.float32)
        np.testing.assert_allclose(layer.run_numpy(x)[0], reference.run_numpy(x)[0], rtol=1e-4, atol=1e-4)
        assert layer.variants.pick(((1, 3, size, size),)).name == name
