"""PyTorch's outputs saved beside a model, and how kuiper's outputs are held to them.

Two records say what was saved, both written when the model was exported:

* `models/manifest.json`, for the committed models (`tools/export_models.py`): one entry per model, with its
  cases (input and output `.npy` files, paths relative to the manifest);
* `NAME.export.json` beside `NAME.pnnx.param`, for a model exported with `kuiper export` (`kuiper/app/export.py`):
  one case, its files named relative to the record.

Either may say `"random_weights": true`: the model was never trained, so its classes for a real image mean
nothing (every committed model: nothing can be downloaded where they are made).

An output matches when its largest absolute difference from PyTorch's is at most TOLERANCE times PyTorch's
largest absolute value: float32 layers that sum in another order than PyTorch's drift by a few units in the
last place, far below that, while a wrong layer is off by much more. With precision fp16 every tensor between
two layers is rounded to half (2^-11 relative) and the allowance is a hundredth (TOLERANCES); tf32 rounds the
operands of products on tensor cores to the same 10 bits of mantissa and is allowed as much.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kuiper.core.errors import ConfigError

TOLERANCES = {"fp32": 1e-4, "fp16": 1e-2, "tf32": 1e-2}
TOLERANCE = TOLERANCES["fp32"]
PARAM_SUFFIX = ".pnnx.param"


def model_name(param) -> str:
    """NAME of NAME.pnnx.param (the file name less its last suffix for other names)."""
    name = Path(param).name
    return name[:-len(PARAM_SUFFIX)] if name.endswith(PARAM_SUFFIX) else Path(param).stem


def export_record(param) -> Path:
    """Where `kuiper export` puts the record of a model: NAME.export.json beside NAME.pnnx.param."""
    return Path(param).parent / f"{model_name(param)}.export.json"


@dataclass(frozen=True)
class Saved:
    """What was saved with a model: its cases, each ([input files], [output files]), and whether its weights
    are random."""

    cases: list = field(default_factory=list)
    random_weights: bool = False


def saved(param) -> Saved | None:
    """The record of a model: NAME.export.json beside it, else its entry in the manifest.json of the folder
    above (the committed models' layout); None when neither knows it."""
    record_path = export_record(param)
    if record_path.exists():
        try:
            record = json.loads(record_path.read_text())
            files = [[record_path.parent / item["file"] for item in record[kind]] for kind in ("inputs", "outputs")]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{record_path}: not a record kuiper export wrote ({type(e).__name__}: {e})") from None
        return Saved([tuple(files)], bool(record.get("random_weights", False)))
    manifest_path = Path(param).resolve().parent.parent / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        entries = [*manifest["models"].values(), *manifest.get("custom_op_models", {}).values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no manifest there, or someone else's file of that name
    for entry in entries:
        if (manifest_path.parent / entry["param"]).resolve() == Path(param).resolve():
            cases = [([manifest_path.parent / p for p in case["inputs"]],
                      [manifest_path.parent / p for p in case["outputs"]]) for case in entry["cases"]]
            return Saved(cases, bool(entry.get("random_weights", False)))
    return None


def saved_case(param, batch=None):
    """([inputs], [PyTorch's outputs]) of the first saved case whose files are all there and whose batch is
    `batch` (any when None), else None. A plain install carries the embedded model's batch-1 case only."""
    record = saved(param)
    for inputs, outputs in record.cases if record else []:
        if not all(p.exists() for p in [*inputs, *outputs]):
            continue
        arrays = [np.load(p) for p in inputs]
        if batch is None or arrays[0].shape[0] == batch:
            return arrays, [np.load(p) for p in outputs]
    return None


def outputs_for(param, inputs: list):
    """PyTorch's outputs ([arrays]) when `inputs` (paths) are exactly the input files of a saved case of this
    model, else None: `kuiper run MODEL --input in0.npy --input in1.npy` is then checked too."""
    record = saved(param)
    given = [Path(p).resolve() for p in inputs]
    for case_inputs, case_outputs in record.cases if record else []:
        if [p.resolve() for p in case_inputs] == given and all(p.exists() for p in case_outputs):
            return [np.load(p) for p in case_outputs]
    return None


@dataclass(frozen=True)
class OutputDiff:
    """One output against PyTorch's: the largest absolute difference (inf where the shapes differ) and that
    over PyTorch's largest absolute value."""

    max_abs: float
    relative: float
    tolerance: float = TOLERANCE

    @property
    def ok(self) -> bool:
        return bool(self.relative <= self.tolerance)  # NaN compares False: a NaN output never matches


@dataclass(frozen=True)
class Comparison:
    diffs: list
    same_count: bool  # as many outputs as PyTorch gave

    @property
    def ok(self) -> bool:
        return self.same_count and all(d.ok for d in self.diffs)

    @property
    def max_abs(self) -> float:
        return max((d.max_abs for d in self.diffs), default=0.0)


def compare(outputs: list, references: list, tolerance: float = TOLERANCE) -> Comparison:
    diffs = []
    for out, ref in zip(outputs, references):
        if out.shape != ref.shape:
            diffs.append(OutputDiff(float("inf"), float("inf"), tolerance))
            continue
        max_abs = float(np.abs(out.astype(np.float64) - ref).max()) if ref.size else 0.0
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        relative = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        diffs.append(OutputDiff(max_abs, relative, tolerance))
    return Comparison(diffs, len(outputs) == len(references))
