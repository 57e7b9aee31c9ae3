"""Shared fixtures: where the committed models and their PyTorch references live."""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


def load_manifest() -> dict:
    with open(MODELS / "manifest.json") as f:
        return json.load(f)


def model_names() -> list:
    return sorted(load_manifest()["models"])


def model_paths(name: str) -> tuple:
    entry = load_manifest()["models"][name]
    return MODELS / entry["param"], MODELS / entry["bin"]


def model_cases(name: str) -> list:
    """[(case name, [input arrays], [reference output arrays]), ...] saved by tools/export_models.py."""
    entry = load_manifest()["models"][name]
    return [
        (c["name"], [np.load(MODELS / p) for p in c["inputs"]], [np.load(MODELS / p) for p in c["outputs"]])
        for c in entry["cases"]
    ]


@pytest.fixture(scope="session")
def manifest() -> dict:
    return load_manifest()
