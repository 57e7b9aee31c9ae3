"""Tensor.to: the same values in another element type, e.g. a padding mask of int64 0/1 turned into bool or
float before it becomes an attention bias.

    mask.to(torch.bool)    0 -> False, anything else -> True
    mask.to(torch.float)   exact for the integers a mask, an id or a position holds (|n| < 2^24)
    x.to(torch.long)       floats truncated toward zero, as C and PyTorch cast (2.7 -> 2, -2.7 -> -2)

pnnx writes the target as `dtype` (torch.float, torch.long, torch.bool, ...; null for a move between devices,
which changes nothing here) beside `copy`, `non_blocking` and `memory_format`: options about where and how the
result is stored, which change no value, so the layer need not read them.

kuiper computes every float in float32 (its fp16 precision is a storage choice of the OpenCL backend), so a cast
to double or half gives float32; for half and bfloat16 the values are rounded to that type first, so that they
are what PyTorch computes. A cast to a complex type is refused. On the OpenCL backend the layer runs on the host:
a cast meets masks and ids, a few bytes once per forward, not the activations.
"""

from __future__ import annotations

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

#: the dtype kuiper computes a torch dtype in
DTYPES = {
    "torch.float": np.float32, "torch.float32": np.float32, "torch.double": np.float32, "torch.float64": np.float32,
    "torch.half": np.float32, "torch.float16": np.float32, "torch.bfloat16": np.float32,
    "torch.long": np.int64, "torch.int64": np.int64, "torch.int": np.int32, "torch.int32": np.int32,
    "torch.short": np.int16, "torch.int16": np.int16, "torch.int8": np.int8, "torch.uint8": np.uint8,
    "torch.bool": np.bool_,
}
#: the narrower float types whose rounding the float32 result keeps
ROUNDED = {"torch.half": "half", "torch.float16": "half", "torch.bfloat16": "bfloat16"}


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (the upper 16 bits of a float32), to nearest, ties to even: add half of
    the dropped range, plus one where the kept part is odd, then drop the low 16 bits. NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    odd = (bits >> 16) & 1
    rounded = ((bits + np.uint32(0x7FFF) + odd) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


@register("Tensor.to")
class To(Layer):
    harmless_params = frozenset({"copy", "non_blocking", "memory_format"})  # where the result lives, not its values

    def __init__(self, op):
        super().__init__(op)
        name = self.param("dtype", None)
        if name is None:  # x.to(device): the values as they are
            self.dtype, self.rounding = None, None
            return
        if not isinstance(name, str) or name not in DTYPES:
            raise self.error(f"dtype={name} is not supported (supported: {', '.join(DTYPES)})")
        self.dtype, self.rounding = np.dtype(DTYPES[name]), ROUNDED.get(name)

    def output_shapes(self, input_shapes):
        return [tuple(input_shapes[0])]

    def output_dtypes(self, input_dtypes):
        return [np.dtype(input_dtypes[0]) if self.dtype is None else self.dtype]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if self.rounding == "half":
            with np.errstate(over="ignore"):  # past half's range: ±inf, as PyTorch's cast gives
                x = x.astype(np.float16)
        elif self.rounding == "bfloat16":
            x = round_to_bfloat16(x)
        # numpy's cast is C's: floats to integers truncate toward zero, anything nonzero is True; a float past the
        # integer's range has no defined result, in PyTorch neither
        with np.errstate(invalid="ignore"):
            np.copyto(out, x, casting="unsafe")
