"""F.pad in its four modes against numpy's np.pad (constant, reflect, edge, wrap) for growing pads, and against
PyTorch's own outputs, recorded here, where a pad crops (where the modes' rules meet the crop).

Every case also runs every path against the reference bit for bit: OpenCL fills and copies for constant
padding, and gathers in cl/pad.cl for the other modes.
"""

import numpy as np
import pytest

import kuiper.layers.pad  # noqa: F401  (registers the layer)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer
from test_slice import SHAPE, rand, refused

NUMPY_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def padded(params, x):
    return make_layer("F.pad", params=params, input_shapes=[x.shape]).run_numpy(x)[0]


def check(params, x, expected):
    np.testing.assert_array_equal(padded(params, x), expected)
    assert_every_path_matches_reference("F.pad", x, rtol=0, params=params)


def pairs(pad, ndim):
    """np.pad's widths: a (before, after) pair per dim, first dim first; F.pad's pad goes from the last dim."""
    given = [tuple(pad[k:k + 2]) for k in range(0, len(pad), 2)][::-1]
    return [(0, 0)] * (ndim - len(given)) + given


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", [
    ((2, 6, 5), (1, 2)),
    (SHAPE, (1, 2, 3, 0)),
    (SHAPE, (2, 2, 2, 2)),
    (SHAPE, (1, 2, 0, 1, 1, 1)),
    ((2, 3, 5, 7), (4, 6, 4, 0)),     # reflect's largest pads: one less than the size
    ((6, 5, 7), (0, 0, 1, 3)),        # only the second-last dim
    ((5,), (3, 2)),                   # a 1-d input
])
def test_pads_match_numpy(mode, shape, pad):
    x = rand(*shape)
    value = -1.5 if mode == "constant" else None
    extra = {"constant_values": -1.5} if mode == "constant" else {}
    expected = np.pad(x, pairs(pad, x.ndim), mode=NUMPY_MODES[mode], **extra)
    check(dict(mode=mode, pad=pad, value=value), x, expected)


def test_swin_v2_pads_its_windows():
    # `F.pad mode=constant pad=(0,0,0,4,0,4) value=None`: None means 0
    x = rand(1, 28, 28, 12)
    check(dict(mode="constant", pad=(0, 0, 0, 4, 0, 4), value=None), x, np.pad(x, [(0, 0), (0, 4), (0, 4), (0, 0)]))


def test_constant_pads_of_every_dim():
    x = rand(2, 6, 5, 7)
    pad = (1, 2, 2, 1, 1, 1, 1, 0)
    check(dict(mode="constant", pad=pad, value=0.5), x, np.pad(x, pairs(pad, 4), constant_values=0.5))


# torch.nn.functional.pad(torch.arange(5.).reshape(1, 1, 5), pad, mode=mode)[0, 0], PyTorch 2.13
CROPS = [
    ("constant", (-1, 2), [1, 2, 3, 4, 0, 0]), ("constant", (2, -1), [0, 0, 0, 1, 2, 3]),
    ("constant", (-3, 4), [3, 4, 0, 0, 0, 0]), ("constant", (-5, 1), [0]), ("constant", (-2, -2), [2]),
    ("constant", (-2, 5), [2, 3, 4, 0, 0, 0, 0, 0]), ("constant", (-5, 0), []),
    ("reflect", (-1, 2), [1, 2, 3, 4, 3, 2]), ("reflect", (2, -1), [2, 1, 0, 1, 2, 3]), ("reflect", (-2, -2), [2]),
    ("reflect", (4, 0), [4, 3, 2, 1, 0, 1, 2, 3, 4]), ("reflect", (-3, 4), [3, 4, 3, 2, 1, 0]),
    ("reflect", (-4, 0), [4]), ("reflect", (-5, 1), [3]),
    ("replicate", (-1, 2), [1, 2, 3, 4, 4, 4]), ("replicate", (2, -1), [0, 0, 0, 1, 2, 3]),
    ("replicate", (5, 0), [0, 0, 0, 0, 0, 0, 1, 2, 3, 4]), ("replicate", (-3, 4), [3, 4, 4, 4, 4, 4]),
    ("replicate", (-5, 1), [4]), ("replicate", (-2, 5), [2, 3, 4, 4, 4, 4, 4, 4]),
    ("circular", (-1, 2), [1, 2, 3, 4, 1, 2]), ("circular", (2, -1), [2, 3, 0, 1, 2, 3]), ("circular", (-2, -2), [2]),
    ("circular", (4, 0), [1, 2, 3, 4, 0, 1, 2, 3, 4]), ("circular", (5, 0), [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]),
    ("circular", (-4, 0), [4]),
]


@pytest.mark.parametrize("mode, pad, torch_output", CROPS)
def test_crops_match_pytorch(mode, pad, torch_output):
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
    params = dict(mode=mode, pad=pad, value=0.0 if mode == "constant" else None)
    np.testing.assert_array_equal(padded(params, x), np.array(torch_output, np.float32).reshape(1, 1, -1))
    if torch_output:  # an empty output has nothing to compare
        assert_every_path_matches_reference("F.pad", np.tile(x, (2, 3, 4)), rtol=0, params=params)


@pytest.mark.parametrize("mode, pad", [("circular", (2, -1, -1, 1)), ("constant", (-2, -3, 1, -1)),
                                       ("reflect", (-1, 2, 2, -3)), ("replicate", (-2, 3, 0, -4))])
def test_two_dims_pad_as_one_then_the_other(mode, pad):
    x = rand(2, 3, 5, 7)
    value = 2.0 if mode == "constant" else None
    height_first = padded(dict(mode=mode, pad=(0, 0) + pad[2:], value=value), x)
    check(dict(mode=mode, pad=pad, value=value), x, padded(dict(mode=mode, pad=pad[:2], value=value), height_first))


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.uint8])
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pads_every_element_size(dtype, mode):
    x = rand(2, 3, 4, 5, dtype=dtype)
    value = 7 if mode == "constant" else None
    extra = {"constant_values": 7} if mode == "constant" else {}
    check(dict(mode=mode, pad=(1, 2, 3, 0), value=value), x,
          np.pad(x, pairs((1, 2, 3, 0), 4), mode=NUMPY_MODES[mode], **extra))


@pytest.mark.parametrize("type, params, shape, expected_mode, extra", [
    ("nn.ConstantPad2d", dict(padding=(1, 2, 0, 3), value=-2.5), SHAPE, "constant", {"constant_values": -2.5}),
    ("nn.ZeroPad2d", dict(padding=(2, 1, 1, 0)), SHAPE, "constant", {}),
    ("nn.ConstantPad1d", dict(padding=2, value=0.0), (2, 6, 5), "constant", {}),  # one number: both sides
    ("nn.ReflectionPad2d", dict(padding=(1, 2, 3, 0)), SHAPE, "reflect", {}),
    ("nn.ReplicationPad1d", dict(padding=(3, 1)), (2, 6, 5), "edge", {}),
    ("nn.CircularPad3d", dict(padding=(1, 0, 0, 1, 1, 1)), SHAPE, "wrap", {}),
])
def test_padding_modules_pad_as_their_mode(type, params, shape, expected_mode, extra):
    # pnnx keeps some padding modules whole (timm's BiT stem: `nn.ConstantPad2d padding=(1,1,1,1) value=0.0`)
    x = rand(*shape)
    dims = int(type[-2])
    given = params["padding"] if isinstance(params["padding"], tuple) else (params["padding"],) * 2 * dims
    expected = np.pad(x, pairs(given, x.ndim), mode=expected_mode, **extra)
    np.testing.assert_array_equal(make_layer(type, params=params, input_shapes=[shape]).run_numpy(x)[0], expected)
    assert_every_path_matches_reference(type, x, rtol=0, params=params)


def test_padding_modules_refuse_a_wrong_count():
    refused(LayerError, "nn.ZeroPad2d", dict(padding=(1, 1)), shapes=(SHAPE,), match="'padding' must have 4 values")
    refused(LayerError, "nn.ReflectionPad2d", dict(padding=1, value=0.0), shapes=(SHAPE,),
            match="value=0.0 means nothing in mode reflect")


@pytest.mark.parametrize("params, shape, error, match", [
    (dict(mode="constant", pad=(1, 2, 3)), SHAPE, LayerError, "must hold a (before, after) pair per dim"),
    (dict(mode="symmetric", pad=(1, 1)), SHAPE, LayerError, "'mode'=symmetric is not supported"),
    (dict(mode="reflect", pad=(1,) * 8), SHAPE, LayerError, "mode reflect pads at most the last 3 dims"),
    (dict(mode="reflect", pad=(1, 1), value=0.0), SHAPE, LayerError, "value=0.0 means nothing in mode reflect"),
    (dict(mode="constant", pad=(1, 1), value="x"), SHAPE, LayerError, "'value' must be a number"),
    (dict(mode="constant", pad=(1,) * 10), SHAPE, ShapeError, "pads 5 dims, the (2, 6, 5, 7) input has 4"),
    (dict(mode="reflect", pad=(7, 0)), SHAPE, ShapeError, "pad (7, 0) of dim 3 must be smaller than its size 7"),
    (dict(mode="reflect", pad=(0, 0, 0, 5)), SHAPE, ShapeError, "must be smaller than its size 5"),
    (dict(mode="circular", pad=(8, 0)), SHAPE, ShapeError, "wraps round more than the 7 element(s) it keeps"),
    (dict(mode="circular", pad=(-3, 5)), SHAPE, ShapeError, "wraps round more than the 4 element(s)"),
    (dict(mode="replicate", pad=(-7, 0)), SHAPE, ShapeError, "cannot pad dim 3 of size 7 to size 0"),
    (dict(mode="replicate", pad=(1, 1)), (2, 6, 0), ShapeError, "cannot pad dim 2 of size 0 to size 2"),
    (dict(mode="constant", pad=(-4, -4)), SHAPE, ShapeError, "crops dim 3 of a (2, 6, 5, 7) input to size -1"),
])
def test_pad_refuses(params, shape, error, match):
    refused(error, "F.pad", params, shapes=(shape,), match=match)
