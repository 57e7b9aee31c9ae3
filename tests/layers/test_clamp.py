"""torch.clamp against a per-element reference."""

import numpy as np
import pytest

from kuiper import LayerError
from kuiper.runtime.backends import make_layer


def clamp_reference(x, lo, hi):
    out = x.astype(np.float64).copy()
    for i, v in np.ndenumerate(out):
        if lo is not None and v < lo:
            out[i] = lo
        if hi is not None and v > hi:
            out[i] = hi
    return out


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (None, 0.25), (0.0, None), (-1, 2), (0.0, "inf")])
def test_clamp_matches_reference(lo, hi):
    x = np.random.default_rng(0).standard_normal((3, 5, 7, 2), dtype=np.float32) * 3
    layer = make_layer("torch.clamp", params={"min": lo, "max": hi}, input_shapes=[x.shape])
    expected_hi = float(hi) if isinstance(hi, str) else hi
    (out,) = layer.run_numpy(x)
    np.testing.assert_array_equal(out, clamp_reference(x, lo, expected_hi).astype(np.float32))


@pytest.mark.parametrize("params", [{"min": None, "max": None}, {"min": 2.0, "max": 1.0}, {"min": "low"}])
def test_bad_bounds_fail_at_build(params):
    with pytest.raises(LayerError, match="torch.clamp"):
        make_layer("torch.clamp", params=params, input_shapes=[(1, 2)])
