"""Lesson 4: The PNNX bin format. Reference solutions."""

import struct
import zipfile

import numpy as np

_LOCAL_HEADER = struct.Struct("<4s22xHH")   # signature, then the name's and the extra field's lengths


def data_offset(bin_path, member: str) -> int:
    """Where the bytes of `member` ("convbn2d_0.weight") start in the .pnnx.bin at `bin_path`: the offset
    of its local header (from the central directory, which zipfile reads) plus the header's 30 bytes, the
    name and the extra field, whose lengths the local header itself gives. See course_notes/04-pnnx-bin.md,
    exercise 1."""
    with zipfile.ZipFile(bin_path) as archive:
        start = archive.getinfo(member).header_offset
    with open(bin_path, "rb") as f:
        f.seek(start)
        signature, name_length, extra_length = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
    assert signature == b"PK\x03\x04"
    return start + _LOCAL_HEADER.size + name_length + extra_length


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 numbers given as their raw 16 bits (a uint16 array): a bfloat16 is
    the upper half of a float32. See course_notes/04-pnnx-bin.md, "Element types"."""
    return (bits.astype(np.uint32) << 16).view(np.float32)
