"""Lesson 3: The PNNX param format. Reference solutions."""

import re

_NUMBER_START = re.compile(r"-?[0-9]")


def value_type(text: str) -> int:
    """pnnx's type code of the parameter value `text`: 0 null, 1 bool, 2 int, 3 float, 4 string, 5 int list,
    6 float list, 7 string list, by the rules of the lesson's table, in its order (no complex numbers).
    See course_notes/03-pnnx-param.md, "Parameter types 0-7"."""
    if "%" in text:
        return 4
    if text in ("None", "()", "[]"):
        return 0
    if text in ("True", "False"):
        return 1
    if text.startswith(("(", "[")):
        kinds = {value_type(element) for element in text[1:-1].split(",")}
        if kinds - {2, 3}:
            return 7
        return 6 if 3 in kinds else 5
    if not _NUMBER_START.match(text):
        return 4
    return 3 if "." in text or "e" in text else 2


def shape_spec(text: str) -> tuple:
    """The shape and element type of an operand's `#` token value, "(1,3,?,%w)f32" -> ((1, 3, None, 'w'),
    'f32'): a size as an int, `?` as None and `%name` as the string "name". See course_notes/03-pnnx-param.md,
    "Operand shapes: `?` and `%sym`"."""
    close = text.index(")")
    dims = []
    for dim in text[1:close].split(","):
        if dim == "?":
            dims.append(None)
        elif dim.startswith("%"):
            dims.append(dim[1:])
        else:
            dims.append(int(dim))
    return tuple(dims), text[close + 1:]
