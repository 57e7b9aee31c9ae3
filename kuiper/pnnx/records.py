"""Plain records the PNNX reader produces: no behaviour beyond small conveniences."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from kuiper.core.errors import PnnxFormatError

# pnnx parameter type codes
NULL, BOOL, INT, FLOAT, STRING, INT_LIST, FLOAT_LIST, STRING_LIST = 0, 1, 2, 3, 4, 5, 6, 7
COMPLEX, COMPLEX_LIST = 10, 11

# A decimal number as pnnx's writer prints it (ints, %g and %e floats).
FLOAT_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")
# How pnnx's writer spells non-finite floats: "inf"/"-inf", "nan" (older writers), "nan.0" (newer ones
# append ".0" to any %g output without a point). pnnx's reader types all of them as strings.
NONFINITE_TEXT = re.compile(r"(-?)(inf|nan)(?:\.0)?")


def text_to_float(text: str) -> float | None:
    """The float a list element or string value spells, or None when it spells none."""
    if FLOAT_TEXT.fullmatch(text):
        return float(text)
    m = NONFINITE_TEXT.fullmatch(text)
    return float(m.group(1) + m.group(2)) if m else None


@dataclass(frozen=True)
class Parameter:
    """One `key=value` parameter: its pnnx type code, the typed value, and the text after '=' as written."""

    type: int
    value: object
    raw: str

    def as_float(self) -> float:
        """The value as a float: ints widen, and inf/nan (which pnnx types as strings) become floats."""
        number = None
        if self.type in (INT, FLOAT):
            number = float(self.value)
        elif self.type == STRING:
            number = text_to_float(self.value)
        if number is None:
            raise PnnxFormatError(f"parameter value {self.raw!r} (type {self.type}) is not a number")
        return number

    def as_floats(self) -> list:
        """The value as a list of floats; a list mixing numbers with inf/nan is a string list until here."""
        if self.type in (INT_LIST, FLOAT_LIST):
            return [float(v) for v in self.value]
        if self.type == STRING_LIST:
            numbers = [text_to_float(v) for v in self.value]
            if None not in numbers:
                return numbers
        raise PnnxFormatError(f"parameter value {self.raw!r} (type {self.type}) is not a list of numbers")


@dataclass
class Attribute:
    """One `@key=(shape)type` weight. `data` is a read-only view into the memory-mapped .bin, in the
    storage dtype of kuiper.pnnx.dtypes.STORAGE (raw bits for bf16 and c32); None until the bin is read."""

    name: str
    dtype: str
    shape: tuple
    data: np.ndarray | None = field(default=None, repr=False)

    def numpy(self) -> np.ndarray:
        """The values in a numpy-native dtype: the zero-copy view itself, except bf16 (widened to float32)
        and c32 (widened to complex64), which are converted into new arrays on each call."""
        if self.data is None:
            raise PnnxFormatError(f"attribute {self.name!r} has no data: its .bin was never read")
        if self.dtype == "bf16":
            # a bfloat16 is the upper half of a float32
            return (self.data.astype(np.uint32) << 16).view(np.float32)
        if self.dtype == "c32":
            values = self.data["real"].astype(np.complex64)
            values.imag = self.data["imag"]
            return values
        return self.data


@dataclass
class Operand:
    """A value flowing between operators. Dims are int, None for `?`, or str for `%sym`."""

    name: str
    shape: tuple | None = None
    dtype: str | None = None
    producer: str | None = None
    consumers: list = field(default_factory=list)


@dataclass
class Operator:
    """One line of the .param file."""

    type: str
    name: str
    line: int
    inputs: list
    outputs: list
    input_names: list
    params: dict
    attrs: dict


@dataclass
class Graph:
    """A whole model: operators in file order, operands by name (in order of first appearance)."""

    param_path: str
    bin_path: str | None
    operators: list
    operands: dict
