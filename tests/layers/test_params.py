"""Parameters the layers refuse: non-finite numbers where a number must be finite, nan anywhere, ints past a
float's range, and parameters the layer never reads."""

import numpy as np
import pytest

from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

NCHW = ((1, 2, 3, 4),)


@pytest.mark.parametrize("type, params, message", [
    # the cases: nan and inf scale_factor raised numpy's ValueError and OverflowError
    ("nn.Upsample", dict(mode="nearest", scale_factor=[float("nan")] * 2), "'scale_factor' must be finite, got nan"),
    ("nn.Upsample", dict(mode="nearest", scale_factor=[float("inf")] * 2), "'scale_factor' must be finite, got inf"),
    ("F.interpolate", dict(mode="bilinear", scale_factor=["nan", "nan"]), "'scale_factor' must be finite, got nan"),
    # ... and eps=nan, max_val=nan, negative_slope=nan passed the range checks that refuse eps=-1
    ("nn.Hardtanh", dict(min_val=-1.0, max_val=float("nan")), "'max_val' must be a number, not nan, got nan"),
    ("nn.LeakyReLU", dict(negative_slope="nan"), "'negative_slope' must be finite, got nan"),
    ("nn.LeakyReLU", dict(negative_slope="-inf"), "'negative_slope' must be finite, got -inf"),
    ("torch.clamp", dict(min=float("nan"), max=None), "'min' must be a number, not nan, got nan"),
    ("nn.LeakyReLU", dict(negative_slope=10 ** 400), "'negative_slope' is out of range: 1000"),
])
def test_non_finite_parameters_are_layer_errors(type, params, message):
    with pytest.raises(LayerError, match=message):
        make_layer(type, params=params, input_shapes=NCHW)


def test_batchnorm_refuses_a_nan_eps():
    weights = {k: np.ones(2, np.float32) for k in ("running_mean", "running_var", "weight", "bias")}
    with pytest.raises(LayerError, match="'eps' must be finite, got nan"):
        make_layer("nn.BatchNorm2d", params=dict(num_features=2, eps=float("nan"), affine=True), attrs=weights,
                   input_shapes=NCHW)


def test_infinite_bounds_leave_a_side_open():
    x = np.linspace(-5, 5, 24, dtype=np.float32).reshape(NCHW[0])
    hardtanh = make_layer("nn.Hardtanh", params=dict(min_val=-1.0, max_val="inf"), input_shapes=NCHW)
    np.testing.assert_array_equal(hardtanh.run_numpy(x)[0], np.maximum(x, -1))
    clamp = make_layer("torch.clamp", params=dict(min=float("-inf"), max=0.5), input_shapes=NCHW)
    np.testing.assert_array_equal(clamp.run_numpy(x)[0], np.minimum(x, 0.5))


def test_a_finite_scale_too_large_to_count_is_a_shape_error():
    upsample = make_layer("nn.Upsample", params=dict(mode="nearest", scale_factor=[1e308, 1e308]), input_shapes=NCHW)
    with pytest.raises(ShapeError, match="too large to count"):
        upsample.output_shapes([NCHW[0]])


def test_parameters_the_layer_never_reads_are_refused():
    with pytest.raises(LayerError, match=r"nn.ReLU operator 'op': unknown parameter\(s\) frobnicate \(this layer "
                                         r"reads: none\)"):
        make_layer("nn.ReLU", params=dict(frobnicate=7), input_shapes=NCHW)
    with pytest.raises(LayerError, match=r"unknown parameter\(s\) slope \(this layer reads: negative_slope\)"):
        make_layer("nn.LeakyReLU", params=dict(slope=0.1), input_shapes=NCHW)
