"""Labels in ultralytics' YOLO format: for a picture NAME.png, a text file NAME.txt holding one line per object,
`class cx cy w h`, the box's centre and size as fractions of the picture's width and height."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kuiper.core.errors import ConfigError


def read_labels(path, width: int, height: int) -> tuple:
    """(boxes (N, 4) xyxy float32 in pixels, classes (N,) int64) of one label file, for a width x height
    picture. A missing file means a picture with nothing in it."""
    path = Path(path)
    if not path.exists():
        return np.zeros((0, 4), np.float32), np.zeros(0, np.int64)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            values = [float(v) for v in fields[:5]]
        except ValueError:
            values = []
        if len(fields) != 5 or len(values) != 5 or not values[0].is_integer() or values[0] < 0 or \
                not all(np.isfinite(values)):
            raise ConfigError(f"{path}:{number}: a label line is `class cx cy w h` (a class index and four "
                              f"fractions): got {line.strip()[:60]!r}")
        rows.append(values)
    labels = np.asarray(rows, np.float64).reshape(-1, 5)
    cx, cy, w, h = (labels[:, 1] * width, labels[:, 2] * height, labels[:, 3] * width, labels[:, 4] * height)
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32)
    return boxes, labels[:, 0].astype(np.int64)


def label_path(image: Path, labels: Path) -> Path:
    """Where the labels of `image` are: LABELS/<image's name>.txt."""
    return Path(labels) / (Path(image).stem + ".txt")
