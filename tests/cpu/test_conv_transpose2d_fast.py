"""The fast nn.ConvTranspose2d (kuiper/cpu/conv_transpose2d.py), on 1 to 3 threads, against the reference layer
(kuiper/layers/conv_transpose2d.py, checked against a direct scatter in tests/layers/test_conv_transpose2d.py)."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference

from kuiper.cpu import threads
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(29)

# name: (parameters, input shape); wide GEMMs split by columns over the threads, narrow ones by rows
CASES = {
    "stride2 pad1 outpad1 groups2 batch3": (dict(in_channels=6, out_channels=4, kernel_size=3, stride=2, padding=1,
                                                 output_padding=1, groups=2), (3, 6, 7, 5)),
    "asymmetric nobias": (dict(in_channels=3, out_channels=5, kernel_size=(4, 3), stride=(2, 3), padding=(3, 0),
                               output_padding=(1, 2), bias=False), (1, 3, 7, 5)),
    "1x1 image dilated depthwise": (dict(in_channels=5, out_channels=5, kernel_size=3, dilation=2, groups=5),
                                    (3, 5, 1, 1)),
    "kernel==stride upsample wide": (dict(in_channels=4, out_channels=7, kernel_size=2, stride=2), (1, 4, 16, 40)),
    "dilation3 groups2": (dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=2, output_padding=2,
                               dilation=3, groups=2), (3, 4, 5, 3)),
    "1x1 kernel": (dict(in_channels=7, out_channels=3, kernel_size=1), (1, 7, 9, 11)),
    "outpad beyond padding": (dict(in_channels=3, out_channels=2, kernel_size=3, stride=2, output_padding=1),
                              (3, 3, 7, 5)),
    "kernel<stride": (dict(in_channels=3, out_channels=5, kernel_size=2, stride=3, padding=1), (1, 3, 9, 11)),
    "unbatched": (dict(in_channels=6, out_channels=4, kernel_size=3, stride=2, padding=1, groups=2), (6, 3, 4)),
}


@pytest.fixture(autouse=True)
def splits(monkeypatch):
    """Every split of the GEMM over kuiper's threads worth making, however little work it is."""
    monkeypatch.setattr(threads, "MIN_MACS", 1)


def deconv_options(in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, dilation=1,
                   groups=1, bias=True):
    """Every parameter of nn.ConvTranspose2d, and random weights for them."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    params = dict(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                  padding=padding, output_padding=output_padding, dilation=dilation, groups=groups, bias=bias)
    attrs = {"weight": RNG.standard_normal((in_channels, out_channels // groups, kh, kw)).astype(np.float32)}
    if bias:
        attrs["bias"] = RNG.standard_normal(out_channels).astype(np.float32)
    return dict(params=params, attrs=attrs)


@pytest.mark.parametrize("name", CASES)
def test_fast_matches_reference(name):
    params, shape = CASES[name]
    x = RNG.standard_normal(shape).astype(np.float32)
    assert assert_every_path_matches_reference("nn.ConvTranspose2d", x, **deconv_options(**params)) \
        == ["forward_numpy"]


def test_buffers_follow_shape_changes():
    params, _ = CASES["stride2 pad1 outpad1 groups2 batch3"]
    options = dict(input_shapes=[(1, 6, 7, 5)], **deconv_options(**params))
    layer = make_layer("nn.ConvTranspose2d", backend="numpy", **options)
    reference = make_layer("nn.ConvTranspose2d", **options)
    for shape in [(3, 6, 9, 11), (1, 6, 7, 5), (6, 3, 4), (1, 6, 7, 5)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(layer.run_numpy(x)[0], reference.run_numpy(x)[0], rtol=1e-4, atol=1e-4)
