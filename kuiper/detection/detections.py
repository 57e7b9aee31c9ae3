"""What a detector found in one picture: boxes, their scores and their classes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Detections:
    """`boxes` (N, 4) float32 x1, y1, x2, y2 in pixels; `scores` (N,) float32; `classes` (N,) int64 class
    indices; best score first."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    def name(self, index: int, names=None) -> str:
        """The name of detection `index`'s class: from `names` when it has one, else the index as text."""
        c = int(self.classes[index])
        return str(names[c]) if names is not None and 0 <= c < len(names) else str(c)

    def as_dicts(self, names=None) -> list:
        """One JSON-ready dict per detection: box [x1, y1, x2, y2], score, class (index) and name."""
        return [{"box": [round(float(v), 2) for v in self.boxes[i]], "score": round(float(self.scores[i]), 5),
                 "class": int(self.classes[i]), "name": self.name(i, names)} for i in range(len(self))]
