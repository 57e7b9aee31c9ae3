"""nn.Unfold (kuiper/layers/unfold.py) against patches cut one by one in a loop, and its OpenCL forward
(cl/conv.cl's im2col) against the reference."""

import numpy as np
import pytest

import kuiper.layers.unfold  # noqa: F401  (registers nn.Unfold)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(23)


def patches(x, kernel, stride, padding, dilation):
    """Column l (places row by row) holds the patch at place l, channel by channel, tap by tap."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
    columns = []
    for y in range(ho):
        for x0 in range(wo):
            patch = padded[:, :, y * sh:y * sh + dh * (kh - 1) + 1:dh, x0 * sw:x0 * sw + dw * (kw - 1) + 1:dw]
            columns.append(patch.reshape(x.shape[0], -1))
    return np.stack(columns, axis=-1)


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", [
    ((2, 3, 16, 16), (4, 4), (4, 4), (0, 0), (1, 1)),   # TNT: non-overlapping patches
    ((1, 2, 7, 9), (3, 2), (2, 1), (1, 0), (1, 2)),     # overlapping, padded, dilated, odd sizes
    ((2, 4, 5, 5), (1, 1), (1, 1), (0, 0), (1, 1)),
])
def test_unfold_cuts_every_patch(shape, kernel, stride, padding, dilation):
    x = RNG.standard_normal(shape).astype(np.float32)
    params = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation)
    layer = make_layer("nn.Unfold", params=params, input_shapes=[shape])
    expected = patches(x, kernel, stride, padding, dilation)
    assert layer.output_shapes([shape]) == [expected.shape]
    np.testing.assert_array_equal(layer.run_numpy(x)[0], expected)
    assert_every_path_matches_reference("nn.Unfold", x, params=params, rtol=0)


def test_unfold_refuses():
    with pytest.raises(LayerError, match="'stride' must be >= 1"):
        make_layer("nn.Unfold", params=dict(kernel_size=2, stride=0), input_shapes=[(1, 1, 4, 4)])
    layer = make_layer("nn.Unfold", name="u", params=dict(kernel_size=5), input_shapes=[(1, 1, 4, 4)])
    with pytest.raises(ShapeError, match=r"nn.Unfold operator 'u': padded input \(4, 4\) is smaller than the "
                                         r"kernel's span 5"):
        layer.output_shapes([(1, 1, 4, 4)])
    with pytest.raises(ShapeError, match=r"expects input \(N, C, H, W\), got \(4, 4\)"):
        layer.output_shapes([(4, 4)])
