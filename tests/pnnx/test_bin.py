"""Attribute bytes: every pnnx element type round-trips through a zip store, without copies."""

import mmap
import struct

import numpy as np
import pytest

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx import BinFile, load

from pnnx_files import files, tiny  # noqa: F401  (fixtures)

# (pnnx type, declared shape, raw little-endian bytes written by the test, what Attribute.numpy() must give)
# The bytes come from struct, independently of the reader's dtype table.
CASES = [
    ("f32", (2, 2), struct.pack("<4f", 1.5, -0.0, 3.0e38, -1e-30),
     np.array([[1.5, -0.0], [3.0e38, -1e-30]], np.float32)),
    ("f64", (3,), struct.pack("<3d", 1e300, -2.5, 1 / 3), np.array([1e300, -2.5, 1 / 3], np.float64)),
    ("f16", (2,), struct.pack("<2e", 65504.0, -0.5), np.array([65504.0, -0.5], np.float16)),
    ("i32", (3,), struct.pack("<3i", -2**31, 2**31 - 1, 7), np.array([-2**31, 2**31 - 1, 7], np.int32)),
    ("i64", (1, 2), struct.pack("<2q", -2**63, 2**63 - 1), np.array([[-2**63, 2**63 - 1]], np.int64)),
    ("i16", (2,), struct.pack("<2h", -32768, 32767), np.array([-32768, 32767], np.int16)),
    ("i8", (2,), struct.pack("<2b", -128, 127), np.array([-128, 127], np.int8)),
    ("u8", (2, 1), struct.pack("<2B", 0, 255), np.array([[0], [255]], np.uint8)),
    ("bool", (3,), bytes([1, 0, 1]), np.array([True, False, True])),
    ("c64", (2,), struct.pack("<4f", 1.0, -2.0, 0.5, 3.0), np.array([1 - 2j, 0.5 + 3j], np.complex64)),
    ("c128", (1,), struct.pack("<2d", 1e200, -1e-200), np.array([1e200 - 1e-200j], np.complex128)),
    # c32 is a (real, imag) pair of float16
    ("c32", (3,), struct.pack("<6e", 1.5, -2.0, 0.0, 65504.0, -0.25, 0.125),
     np.array([1.5 - 2j, 65504j, -0.25 + 0.125j], np.complex64)),
    # bf16 is the upper 16 bits of a float32; these values are exact in bf16
    ("bf16", (2, 3), b"".join(struct.pack("<f", v)[2:] for v in (1.0, -2.5, 0.15625, 65280.0, 2.0**-126, -np.inf)),
     np.array([[1.0, -2.5, 0.15625], [65280.0, 2.0**-126, -np.inf]], np.float32)),
    # a 0-d attribute holds one element; a zero-size one holds no bytes
    ("f32", (), struct.pack("<f", 2.5), np.array(2.5, np.float32)),
    ("i64", (0, 3), b"", np.zeros((0, 3), np.int64)),
]


def _param_with(shape, dtype):
    dims = ",".join(map(str, shape))
    return ("7767517\n2 1\n"
            f"pnnx.Attribute           const                    0 1 0 @data=({dims}){dtype} #0=({dims}){dtype}\n"
            "pnnx.Output              out                      1 0 0\n")


@pytest.mark.parametrize("zip64", [False, True], ids=["zip", "zip64"])
@pytest.mark.parametrize("dtype, shape, raw, expected", CASES, ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_every_dtype_round_trips(files, dtype, shape, raw, expected, zip64):
    param = files.param(_param_with(shape, dtype))
    files.bin({"const.data": raw}, zip64={"const.data"} if zip64 else ())
    attr = load(param).operators[0].attrs["data"]
    assert (attr.dtype, attr.shape, attr.data.shape) == (dtype, shape, shape)
    assert attr.data.tobytes() == raw  # the stored bits, untouched
    values = attr.numpy()
    assert values.dtype == expected.dtype and values.shape == expected.shape
    assert values.tobytes() == expected.tobytes()


def test_bf16_and_c32_are_widened_into_new_arrays(files):
    raw = struct.pack("<2e", 1.0, 2.0)
    files.bin({"const.data": raw})
    for dtype, shape in (("bf16", (2,)), ("c32", (1,))):
        attr = load(files.param(_param_with(shape, dtype))).operators[0].attrs["data"]
        assert not np.shares_memory(attr.numpy(), attr.data)
        assert attr.numpy().flags.writeable


def _mapped_buffer(array):
    """Follow array.base to the object that owns the memory."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_views_are_read_only_and_share_the_memory_map(tiny):
    param, bin_path = tiny
    graph = load(param)
    weight = graph.operators[1].attrs["weight"]
    assert np.array_equal(weight.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    assert weight.numpy() is weight.data
    assert not weight.data.flags.writeable and not weight.data.flags.owndata
    assert isinstance(_mapped_buffer(weight.data), mmap.mmap)
    with pytest.raises(ValueError):
        weight.data[0, 0] = 1.0
    # two views of one member from one store are two windows on the same mapped bytes, not two copies
    store = BinFile(bin_path)
    first, again = store.view("fc.weight", "f32", (2, 3)), store.view("fc.weight", "f32", (2, 3))
    assert first is not again and np.shares_memory(first, again)
    assert _mapped_buffer(first) is _mapped_buffer(again)


def test_views_outlive_the_store(tiny):
    param, bin_path = tiny
    view = BinFile(bin_path).view("fc.bias", "f32", (2,))
    assert view.tolist() == [0.5, -1.0]  # the map stays alive through the view


def test_extra_members_are_ignored_and_names_listed(files):
    param = files.param(_param_with((1,), "u8"))
    bin_path = files.bin({"unused": b"xyz", "const.data": b"\x07"})
    assert load(param).operators[0].attrs["data"].numpy().tolist() == [7]
    store = BinFile(bin_path)
    assert store.names() == ["unused", "const.data"] and "unused" in store and "nope" not in store


def test_view_refuses_an_unknown_type(tiny):
    _, bin_path = tiny
    with pytest.raises(PnnxFormatError, match=r"\[member fc.bias\]: unknown element type 'f8'"):
        BinFile(bin_path).view("fc.bias", "f8", (1,))
