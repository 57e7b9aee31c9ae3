"""Lesson 3: The PNNX param format. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 3`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import re


def value_type(text: str) -> int:
    """pnnx's type code of the parameter value `text`: 0 null, 1 bool, 2 int, 3 float, 4 string, 5 int list,
    6 float list, 7 string list, by the rules of the lesson's table, in its order (no complex numbers).
    See course_notes/03-pnnx-param.md, "Parameter types 0-7"."""
    raise NotImplementedError('lesson 3: write value_type() in exercises/lesson_03.py; '
                              'see course_notes/03-pnnx-param.md, "Parameter types 0-7"')


def shape_spec(text: str) -> tuple:
    """The shape and element type of an operand's `#` token value, "(1,3,?,%w)f32" -> ((1, 3, None, 'w'),
    'f32'): a size as an int, `?` as None and `%name` as the string "name". See course_notes/03-pnnx-param.md,
    "Operand shapes: `?` and `%sym`"."""
    raise NotImplementedError('lesson 3: write shape_spec() in exercises/lesson_03.py; '
                              'see course_notes/03-pnnx-param.md, "Operand shapes: `?` and `%sym`"')
