"""Lesson 1: The big picture. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 1`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import collections
import json
from pathlib import Path
import numpy as np
import kuiper
import kuiper.pnnx


MODELS = Path(__file__).resolve().parent.parent / "models"


def operator_types(param_path) -> dict:
    """{operator type: how many operators of that type} in the model at `param_path`, counted over the
    records `kuiper.pnnx.parse_param` reads (lesson 3 explains them; here only their `type` matters).
    See course_notes/01-big-picture.md, exercise 3."""
    raise NotImplementedError('lesson 1: write operator_types() in exercises/lesson_01.py; '
                              'see course_notes/01-big-picture.md, exercise 3')


def run_case(name: str, case: str) -> list:
    """Run the committed model `name` on the inputs of its saved case `case` ("b1", "b2", ...) and return
    kuiper's outputs, a list of arrays. models/manifest.json says where the model's files and the case's
    .npy inputs are (paths relative to models/). See course_notes/01-big-picture.md, exercise 2."""
    raise NotImplementedError('lesson 1: write run_case() in exercises/lesson_01.py; '
                              'see course_notes/01-big-picture.md, exercise 2')
