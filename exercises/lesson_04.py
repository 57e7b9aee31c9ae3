"""Lesson 4: The PNNX bin format. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 4`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import struct
import zipfile
import numpy as np


def data_offset(bin_path, member: str) -> int:
    """Where the bytes of `member` ("convbn2d_0.weight") start in the .pnnx.bin at `bin_path`: the offset
    of its local header (from the central directory, which zipfile reads) plus the header's 30 bytes, the
    name and the extra field, whose lengths the local header itself gives. See course_notes/04-pnnx-bin.md,
    exercise 1."""
    raise NotImplementedError('lesson 4: write data_offset() in exercises/lesson_04.py; '
                              'see course_notes/04-pnnx-bin.md, exercise 1')


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 numbers given as their raw 16 bits (a uint16 array): a bfloat16 is
    the upper half of a float32. See course_notes/04-pnnx-bin.md, "Element types"."""
    raise NotImplementedError('lesson 4: write bf16_to_float32() in exercises/lesson_04.py; '
                              'see course_notes/04-pnnx-bin.md, "Element types"')
