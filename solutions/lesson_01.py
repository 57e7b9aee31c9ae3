"""Lesson 1: The big picture. Reference solutions."""

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
    records = kuiper.pnnx.parse_param(param_path)
    return dict(collections.Counter(op.type for op in records.operators))


def run_case(name: str, case: str) -> list:
    """Run the committed model `name` on the inputs of its saved case `case` ("b1", "b2", ...) and return
    kuiper's outputs, a list of arrays. models/manifest.json says where the model's files and the case's
    .npy inputs are (paths relative to models/). See course_notes/01-big-picture.md, exercise 2."""
    entry = json.loads((MODELS / "manifest.json").read_text())["models"][name]
    (found,) = [c for c in entry["cases"] if c["name"] == case]
    graph = kuiper.load(MODELS / entry["param"], backend="numpy")
    return list(graph.forward(*[np.load(MODELS / path) for path in found["inputs"]]))
