"""Plain records the PNNX reader produces: no behaviour beyond small conveniences."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# pnnx parameter type codes
NULL, BOOL, INT, FLOAT, STRING, INT_LIST, FLOAT_LIST, STRING_LIST = 0, 1, 2, 3, 4, 5, 6, 7
COMPLEX, COMPLEX_LIST = 10, 11


@dataclass(frozen=True)
class Parameter:
    """One `key=value` parameter: its pnnx type code, the typed value, and the text as written."""

    type: int
    value: object
    raw: str


@dataclass
class Attribute:
    """One `@key=(shape)type` weight. `data` is a read-only view into the memory-mapped .bin."""

    name: str
    dtype: str
    shape: tuple
    data: np.ndarray

    def numpy(self) -> np.ndarray:
        """The values in a numpy-native dtype (bf16 widened to float32, c32 to complex64)."""
        raise NotImplementedError  # filled in by kuiper.pnnx.bin_file


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
