"""Typing of the text after '=' in a .param line: parameter values and `(shape)TYPE` specs.

Parameter values follow pnnx's reader (ir.cpp, Parameter::parse_from_string), rule by rule:
  text containing '%' -> string (it names a symbolic dimension); `None`, `()`, `[]` -> null;
  `True`/`False` -> bool; `(...)`/`[...]` -> list split on ','; a scalar or element not starting with a
  digit or '-digit' -> string; one containing '.' or 'e' -> float; else int.
Where pnnx's reader is lossy or lenient we choose, and say so:
  - A list mixing kinds: pnnx files each element under its own kind and keeps only the last element's
    kind, dropping the others. We keep every element: any string element makes a string list (each
    element's text as written), else any complex makes a complex list, else any float a float list.
  - `2.000000e+00+3.000000e+00j`, which pnnx's writer prints for complex values, is complex (type 10,
    or 11 in a list); pnnx's reader would keep only the real part.
  - Numbers must be whole: `1x` or `1.2.3` is an error where pnnx's stoi/stof would read a prefix.
  - Floats stay Python floats (pnnx rounds to float32) and ints are not clamped to int32.
  - `inf`, `-inf`, `nan`, `nan.0` stay strings as in pnnx; Parameter.as_float()/as_floats() read them.
"""

from __future__ import annotations

import re

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx.dtypes import STORAGE, UNKNOWN
from kuiper.pnnx.records import (
    BOOL, COMPLEX, COMPLEX_LIST, FLOAT, FLOAT_LIST, FLOAT_TEXT, INT, INT_LIST, NULL, STRING, STRING_LIST,
    Parameter,
)

_INT_TEXT = re.compile(r"-?[0-9]+")
_NUMERIC_START = re.compile(r"-?[0-9]")
# pnnx's writer prints "%e+%ej", so a negative imaginary part arrives as "+-"
_COMPLEX_TEXT = re.compile(rf"({FLOAT_TEXT.pattern})([+-])({FLOAT_TEXT.pattern})j")


def parse_value(text: str) -> Parameter:
    """Type one parameter value (the text after '='). Raises PnnxFormatError for a malformed value."""
    if "%" in text:
        return Parameter(STRING, text, text)
    if text in ("None", "()", "[]"):
        return Parameter(NULL, None, text)
    if text in ("True", "False"):
        return Parameter(BOOL, text == "True", text)
    if text.startswith(("(", "[")):
        return _parse_list(text)
    return _parse_scalar(text)


def _parse_list(text: str) -> Parameter:
    closer = ")" if text[0] == "(" else "]"
    if len(text) < 2 or text[-1] != closer:
        raise PnnxFormatError(f"list {text!r} does not end with {closer!r}")
    elements = text[1:-1].split(",")
    items = [_parse_scalar(e) for e in elements]
    kinds = {p.type for p in items}
    if STRING in kinds:
        return Parameter(STRING_LIST, elements, text)
    if COMPLEX in kinds:
        return Parameter(COMPLEX_LIST, [complex(p.value) for p in items], text)
    if FLOAT in kinds:
        return Parameter(FLOAT_LIST, [float(p.value) for p in items], text)
    return Parameter(INT_LIST, [p.value for p in items], text)


def _parse_scalar(text: str) -> Parameter:
    if not _NUMERIC_START.match(text):
        return Parameter(STRING, text, text)
    if text.endswith("j"):
        m = _COMPLEX_TEXT.fullmatch(text)
        if not m:
            raise PnnxFormatError(f"{text!r} ends in 'j' but is not a complex number like 1.0e+00+2.0e+00j")
        imag = float(m.group(3)) if m.group(2) == "+" else -float(m.group(3))
        return Parameter(COMPLEX, complex(float(m.group(1)), imag), text)
    if "." in text or "e" in text:
        if not FLOAT_TEXT.fullmatch(text):
            raise PnnxFormatError(f"{text!r} starts like a number but is not a float")
        return Parameter(FLOAT, float(text), text)
    if not _INT_TEXT.fullmatch(text):
        raise PnnxFormatError(f"{text!r} starts like a number but is not an integer")
    return Parameter(INT, int(text), text)


def parse_spec(text: str, *, dynamic: bool) -> tuple:
    """Read `(d0,d1,...)TYPE` into (shape, type name). Operand specs (`dynamic`) may use `?` (-> None) and
    `%name` (-> "name") dims and the type `null` (-> None); attribute specs need whole sizes and a type."""
    close = text.rfind(")")
    if not text.startswith("(") or close < 0:
        raise PnnxFormatError(f"{text!r} is not of the form (d0,d1,...)TYPE")
    dtype = text[close + 1:]
    if dtype not in STORAGE and not (dynamic and dtype == UNKNOWN):
        known = " ".join(STORAGE)
        raise PnnxFormatError(f"unknown element type {dtype!r} in {text!r} (known: {known})")
    inner = text[1:close]
    shape = () if inner == "" else tuple(_parse_dim(d, text, dynamic) for d in inner.split(","))
    return shape, None if dtype == UNKNOWN else dtype


def _parse_dim(dim: str, text: str, dynamic: bool):
    if re.fullmatch(r"[0-9]+", dim):
        return int(dim)
    if dynamic and dim == "?":
        return None
    if dynamic and dim.startswith("%") and len(dim) > 1:
        return dim[1:]
    allowed = "a size, '?' or '%name'" if dynamic else "a size"
    raise PnnxFormatError(f"dimension {dim!r} in {text!r} is not {allowed}")
