"""nn.Conv1d (kuiper/layers/conv1d.py) against a direct convolution along L in float64, and its OpenCL forward
against the reference."""

import numpy as np
import pytest

import kuiper.layers.conv1d  # noqa: F401  (registers nn.Conv1d)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(11)


def conv1d_direct(x, weight, bias, stride, padding, dilation, groups):
    """out[n, o, t] = bias[o] + sum over o's group's channels c and taps j of x[n, c, t*stride - pad + j*dilation]
    (taps off the input read zero)."""
    x, weight = x.astype(np.float64), weight.astype(np.float64)
    n, _, length = x.shape
    cout, cin_g, k = weight.shape
    left, right = padding
    lo = (length + left + right - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((n, cout, lo)) + (0 if bias is None else bias.reshape(-1, 1))
    for o in range(cout):
        g = o // (cout // groups)
        for t in range(lo):
            for j in range(k):
                i = t * stride - left + j * dilation
                if 0 <= i < length:
                    out[:, o, t] += x[:, g * cin_g:(g + 1) * cin_g, i] @ weight[o, :, j]
    return out


@pytest.mark.parametrize("cin, cout, k, stride, padding, dilation, groups, bias, length", [
    (1, 1, 5, 1, 2, 1, 1, False, 64),       # ECA's channel attention: 5 taps along the channels
    (4, 6, 3, 2, 1, 1, 2, True, 11),
    (3, 5, 4, 1, "same", 2, 1, True, 9),    # 'same' with an even kernel: the extra tap pads the right
    (6, 6, 3, 3, 0, 1, 6, True, 13),        # depthwise, strided, unpadded
])
def test_conv1d_matches_a_direct_convolution(cin, cout, k, stride, padding, dilation, groups, bias, length):
    x = RNG.standard_normal((2, cin, length)).astype(np.float32)
    weight = RNG.standard_normal((cout, cin // groups, k)).astype(np.float32)
    attrs = {"weight": weight} | ({"bias": RNG.standard_normal(cout).astype(np.float32)} if bias else {})
    params = dict(in_channels=cin, out_channels=cout, kernel_size=[k], stride=[stride], dilation=[dilation],
                  groups=groups, bias=bias, padding_mode="zeros",
                  padding=padding if isinstance(padding, str) else [padding])
    total = dilation * (k - 1)
    pads = (total // 2, total - total // 2) if padding == "same" else (padding, padding)
    expected = conv1d_direct(x, weight, attrs.get("bias"), stride, pads, dilation, groups)
    layer = make_layer("nn.Conv1d", params=params, attrs=attrs, input_shapes=[x.shape])
    assert layer.output_shapes([x.shape]) == [expected.shape]
    np.testing.assert_allclose(layer.run_numpy(x)[0], expected, rtol=1e-5, atol=1e-5)
    assert_every_path_matches_reference("nn.Conv1d", x, params=params, attrs=attrs)


def test_conv1d_refuses():
    params = dict(in_channels=2, out_channels=2, kernel_size=[3], bias=False)
    with pytest.raises(LayerError, match="'kernel_size' must have 1 values"):
        make_layer("nn.Conv1d", params=params | {"kernel_size": [3, 3]}, attrs={"weight": np.ones((2, 2, 3))})
    with pytest.raises(LayerError, match=r"nn.Conv1d operator 'op': weight '@weight' has shape \(2, 2, 3, 1\)"):
        make_layer("nn.Conv1d", params=params, attrs={"weight": np.ones((2, 2, 3, 1))})
    layer = make_layer("nn.Conv1d", params=params, attrs={"weight": np.ones((2, 2, 3))})
    with pytest.raises(ShapeError, match=r"expects input \(N, C, L\) or \(C, L\), got \(1, 2, 4, 4\)"):
        layer.output_shapes([(1, 2, 4, 4)])
    with pytest.raises(ShapeError, match="nn.Conv1d operator 'op'"):
        layer.output_shapes([(1, 3, 8)])
