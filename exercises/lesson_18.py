"""Lesson 18: Your own OpenCL operator. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 18`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

from pathlib import Path


def write_softsign_op(folder) -> Path:
    """Write a custom operator for `nn.Softsign` with a parameter: y = x / (alpha + |x|), `alpha` a float that
    defaults to 1.0 when the operator's line has none. Put into `folder` the config (softsign.toml), its OpenCL
    kernel, passed alpha as a define, and its numpy reference, and return the config's path.
    See course_notes/18-custom-opencl-operator.md, exercise 1."""
    raise NotImplementedError('lesson 18: write write_softsign_op() in exercises/lesson_18.py; '
                              'see course_notes/18-custom-opencl-operator.md, exercise 1')
