"""Tensor.to against element rules written out here: Python's own int(), bool() and float() per element, and
bfloat16 as the float32 whose low 16 bits a round to nearest (ties to even) cleared, found by comparing the two
bfloat16 neighbours of each value, not by the layer's bit arithmetic."""

import math
import struct

import numpy as np
import pytest

import kuiper.layers.cast  # noqa: F401  (registers the layer)
from conftest import assert_every_path_matches_reference
from kuiper.core.errors import LayerError
from kuiper.runtime.backends import make_layer

MASK = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=np.int64)
VALUES = np.array([[-2.7, -0.5, 0.0, 0.4], [1.5, 2.7, -0.0, 1e6]], dtype=np.float32)


def per_element(x, rule, dtype):
    return np.array([rule(v) for v in x.ravel().tolist()], dtype=dtype).reshape(x.shape)


def run(x, **params):
    return make_layer("Tensor.to", params=params, input_shapes=[x.shape]).run_numpy(x)[0]


@pytest.mark.parametrize("dtype, rule, expected", [
    ("torch.bool", bool, np.bool_),
    ("torch.float", float, np.float32),
    ("torch.long", int, np.int64),       # Python's int() truncates toward zero, as C's cast does
    ("torch.int", int, np.int32),
])
@pytest.mark.parametrize("x", [MASK, VALUES, MASK.astype(bool)], ids=["int64", "float32", "bool"])
def test_cast_is_the_element_rule_of_the_target_type(x, dtype, rule, expected):
    out = run(x, dtype=dtype, copy=False)
    assert out.dtype == expected
    np.testing.assert_array_equal(out, per_element(x, rule, expected))
    assert_every_path_matches_reference("Tensor.to", x, rtol=0, params=dict(dtype=dtype, copy=False))


def test_no_dtype_moves_nothing_and_the_storage_options_change_nothing():
    params = dict(dtype=None, copy=True, non_blocking=False, memory_format="torch.contiguous_format")
    out = run(MASK, **params)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, MASK)
    assert_every_path_matches_reference("Tensor.to", MASK, rtol=0, params=params)


def test_half_keeps_float32_storage_with_halfs_rounding():
    x = np.array([1 + 2 ** -12, 1 + 3 * 2 ** -12, 70000.0, 1e-8], dtype=np.float32)
    out = run(x, dtype="torch.half")
    assert out.dtype == np.float32
    # half keeps 10 fraction bits: 1 + 2^-12 rounds down to 1, 1 + 3 * 2^-12 up to 1 + 2^-10; past 65504: inf
    np.testing.assert_array_equal(out, [1.0, 1 + 2 ** -10, np.inf, 0.0])


def as_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bfloat16_nearest(v: float) -> float:
    """The bfloat16 value nearest v, ties to the one with an even last kept bit; as IEEE rounds, a value nearer
    2^128 (the next power past the largest exponent) than the largest bfloat16 becomes infinity."""
    if math.isnan(v):
        return v
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    down = bits & 0xFFFF0000
    low = as_float(down)
    up = down + 0x10000
    high = math.copysign(2.0 ** 128, v) if (up >> 23) & 0xFF == 0xFF else as_float(up)
    if abs(v - low) != abs(high - v):
        nearest = low if abs(v - low) < abs(high - v) else high
    else:
        nearest = low if (down >> 16) % 2 == 0 else high
    return math.copysign(math.inf, v) if abs(nearest) == 2.0 ** 128 else nearest


def test_bfloat16_rounds_to_nearest_even_and_keeps_float32_storage():
    rng = np.random.default_rng(0)
    halfway = [1 + 2 ** -8, 1 + 3 * 2 ** -8]  # exactly between two bfloat16 values: to the even one
    edges = [np.nan, -0.0, 3.38e38, 3.4e38, -3.4e38]  # past the largest bfloat16 by more than half a step: inf
    x = np.concatenate([rng.standard_normal(64) * 100, halfway, edges]).astype(np.float32)
    out = run(x, dtype="torch.bfloat16")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, per_element(x, bfloat16_nearest, np.float32))


def test_unsupported_targets_are_refused_naming_them():
    with pytest.raises(LayerError, match="dtype=torch.complex64 is not supported"):
        run(VALUES, dtype="torch.complex64")
