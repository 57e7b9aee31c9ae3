"""A classifier over many images: batches of prepared images through one graph, one row per image, and rows
written as CSV or JSON Lines (`kuiper run MODEL --input FOLDER --out rows.csv`).

An image that cannot be read is skipped with a warning naming it, and the run goes on: one corrupt file
should not throw away the work on thousands of others. The rows then hold only the images that were read
(`skipped` counts the rest), and a run where none could be read is an error.
"""

from __future__ import annotations

import csv
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiper.core.errors import ConfigError, ImageError, InputError, KuiperWarning
from kuiper.app.images import Preprocess, load_image
from kuiper.app.labels import check_names, names_for, top_k

ROW_FORMATS = (".csv", ".jsonl")
CSV_COLUMNS = ("path", "index", "label", "score", "topk")


def json_float(x) -> float | None:
    """A float for JSON, which has no NaN or infinity: those become null."""
    x = float(x)
    return x if np.isfinite(x) else None


@dataclass(frozen=True)
class Row:
    """One image's best classes, best first: indices, the model's scores for them (its output values, logits
    for most classifiers), and their names (None where the classes have none)."""

    path: Path
    indices: list
    values: list
    labels: list | None


@dataclass
class FolderRun:
    rows: list
    skipped: list  # the paths that could not be read


def classify(graph, paths: list, pre: Preprocess = Preprocess(), batch: int = 8, topk: int = 5, names=None,
             on_progress=None) -> FolderRun:
    """Run `graph` (one input, first output of shape (N, classes)) over `paths`, `batch` images per forward.
    `on_progress(n)` is told how many more images are done after each batch."""
    run = FolderRun([], [])
    for start in range(0, len(paths), batch):
        chunk = paths[start:start + batch]
        done = classify_batch(graph, chunk, pre, topk, names)
        run.rows += done.rows
        run.skipped += done.skipped
        if on_progress is not None:
            on_progress(len(chunk))
    if not run.rows:
        raise ImageError(f"none of the {len(paths)} image(s) could be read")
    return run


def classify_batch(graph, paths: list, pre: Preprocess, topk: int, names=None, data=None) -> FolderRun:
    """One forward over the images of `paths` that can be read (the others are skipped with a warning);
    `data`, when given, holds the files' contents, read elsewhere (kuiper/app/ray_data.py), one per path."""
    run, arrays, kept = FolderRun([], []), [], []
    for n, path in enumerate(paths):
        try:
            arrays.append(load_image(path, pre, None if data is None else data[n]))
            kept.append(path)
        except ImageError as e:
            warnings.warn(f"skipped {e}", KuiperWarning, stacklevel=3)
            run.skipped.append(path)
    if not arrays:
        return run
    output = graph.forward(np.concatenate(arrays))[0]
    if output.ndim != 2:
        raise InputError(f"the model's first output has shape {output.shape}, not (images, classes): "
                         f"a folder of images gives one row of classes per image")
    check_names(names, [output])
    indices, values = top_k(output, topk)
    labels = names_for(output, names)
    run.rows = [Row(path, indices[n].tolist(), values[n].tolist(),
                    None if labels is None else [labels[i] for i in indices[n]]) for n, path in enumerate(kept)]
    return run


def row_dict(row: Row) -> dict:
    """A row as JSON: {"path", "indices", "labels", "values"} (labels null where the classes have no names)."""
    return {"path": str(row.path), "indices": row.indices, "labels": row.labels,
            "values": [json_float(v) for v in row.values]}


def write_rows(path: Path, rows: list) -> None:
    """`.csv`: a header, then per image its path, best class (index, label, score) and the top-k indices
    separated by spaces; `.jsonl`: one row_dict per line."""
    path = Path(path)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row_dict(row)) + "\n" for row in rows))
        return
    if path.suffix != ".csv":
        raise ConfigError(f"{path}: rows are written as {' or '.join(ROW_FORMATS)}")
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            label = row.labels[0] if row.labels else ""
            writer.writerow([str(row.path), row.indices[0], label, f"{row.values[0]:.6g}",
                             " ".join(map(str, row.indices))])
