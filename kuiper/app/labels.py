"""Reading a classifier's output: its best classes, and their names.

A model's output of shape (N, K) is read as one row of K class scores per item. When K is 1000 the classes
are taken to be ImageNet-1k's, whose names ship with kuiper (`kuiper/data/imagenet_classes.txt`, from
torchvision); a model with other classes brings its own names, one per line (`kuiper run --labels FILE`).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from kuiper.core.errors import ConfigError

IMAGENET_CLASSES = 1000


def read_names(path) -> list:
    """Class names, one per line; blank lines and lines starting with '#' are not names."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"class names {path}: cannot read them ({e})") from None
    names = [line.strip() for line in text.splitlines()]
    return [name for name in names if name and not name.startswith("#")]


@lru_cache(maxsize=1)
def imagenet_classes() -> tuple:
    """The 1000 ImageNet-1k class names, in class-index order (package data, so a plain install has them)."""
    names = read_names(resources.files("kuiper") / "data" / "imagenet_classes.txt")
    assert len(names) == IMAGENET_CLASSES, f"imagenet_classes.txt holds {len(names)} names"
    return tuple(names)


def names_for(output: np.ndarray, names=None):
    """The class names of an output: `names` when given and as many as the output's classes, ImageNet's for an
    (N, 1000) output, else None (an output that is not one row of scores per item, or has other classes)."""
    if output.ndim != 2:
        return None
    if names is not None and len(names) == output.shape[1]:
        return list(names)
    return list(imagenet_classes()) if output.shape[1] == IMAGENET_CLASSES else None


def check_names(names, outputs: list) -> None:
    """Class names that fit none of the outputs were meant for another model: say so rather than drop them."""
    if names is not None and not any(out.ndim == 2 and out.shape[1] == len(names) for out in outputs):
        widths = ", ".join(str(out.shape[1]) for out in outputs if out.ndim == 2) or "none"
        raise ConfigError(f"{len(names)} class names, but no output has {len(names)} classes "
                          f"(classes per output: {widths})")


def top_k(output: np.ndarray, k: int) -> tuple:
    """(indices, values), each (N, min(k, K)): every row's k largest scores, the largest first."""
    k = min(k, output.shape[1])
    # argpartition finds the k best in linear time; only those k are then sorted
    best = np.argpartition(-output, k - 1, axis=1)[:, :k]
    values = np.take_along_axis(output, best, 1)
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(best, order, 1), np.take_along_axis(values, order, 1)
