"""The element types pnnx writes after a shape, as in `@weight=(8,3,3,3)f32` or `#0=(1,3,?,?)f32`."""

import numpy as np

# How each type's raw bytes sit in the .bin: little-endian, C order. The item sizes are pnnx's
# (4 8 2 4 8 2 1 1 1 8 16 4 2 bytes in this order).
STORAGE = {
    "f32": np.dtype("<f4"),
    "f64": np.dtype("<f8"),
    "f16": np.dtype("<f2"),
    "i32": np.dtype("<i4"),
    "i64": np.dtype("<i8"),
    "i16": np.dtype("<i2"),
    "i8": np.dtype("i1"),
    "u8": np.dtype("u1"),
    "bool": np.dtype("?"),
    "c64": np.dtype("<c8"),
    "c128": np.dtype("<c16"),
    # numpy has neither complex32 nor bfloat16: keep their bits, Attribute.numpy() widens them
    "c32": np.dtype([("real", "<f2"), ("imag", "<f2")]),
    "bf16": np.dtype("<u2"),
}

# pnnx's writer prints "null" for an operand whose element type it never learned.
UNKNOWN = "null"

# The numpy dtype kuiper computes in, per pnnx type: complex32 as complex64, bfloat16 as float32.
_COMPUTE = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64,
    "i16": np.int16, "i8": np.int8, "u8": np.uint8, "bool": np.bool_, "c64": np.complex64,
    "c128": np.complex128, "c32": np.complex64, "bf16": np.float32,
}


def numpy_dtype(pnnx_dtype: str | None) -> np.dtype:
    """The numpy dtype kuiper computes in for a pnnx type name (float32 when unknown)."""
    return np.dtype(_COMPUTE.get(pnnx_dtype or "f32", np.float32))
