"""Mean average precision of a detector over a data set, as COCO and ultralytics compute it.

For each picture, the detections (best first) are matched to the labelled boxes: a detection is a true
positive at IoU threshold t when it overlaps an unclaimed label of its class by at least t, the best-overlapping
such label being the one it claims. Over the data set, each class's detections are sorted by score; precision
and recall after each one make its precision-recall curve, whose precision is first made non-increasing in
recall (the envelope) and then integrated over recall. `method="interp"` samples the envelope at 101 recall
points (0, 0.01, ..., 1) and integrates them by the trapezoid rule (COCO's and ultralytics' way);
`"continuous"` sums the envelope at every point where recall changes (all-point, PASCAL VOC 2010+).

    evaluation = Evaluation(classes=4)
    evaluation.add(detections, label_boxes, label_classes)   # once per picture
    evaluation.result().map50
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kuiper.core.errors import ConfigError
from kuiper.detection.boxes import iou as box_iou
from kuiper.detection.detections import Detections

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)  # COCO's: 0.5, 0.55, ..., 0.95
METHODS = ("interp", "continuous")


def match(detections: Detections, boxes: np.ndarray, classes: np.ndarray,
          thresholds: np.ndarray = IOU_THRESHOLDS) -> np.ndarray:
    """(detections, thresholds) bool: which detections are true positives at each IoU threshold (see the module
    docstring); the detections in the order given (best first)."""
    correct = np.zeros((len(detections), len(thresholds)), dtype=bool)
    if not len(detections) or not len(boxes):
        return correct
    overlap = box_iou(np.asarray(boxes, np.float32), detections.boxes)  # (labels, detections)
    overlap = overlap * (np.asarray(classes)[:, None] == detections.classes[None, :])
    claimed = np.zeros((len(boxes), len(thresholds)), dtype=bool)
    columns = np.arange(len(thresholds))
    for j in np.flatnonzero((overlap >= thresholds.min()).any(axis=0)):
        free = np.where(claimed, 0.0, overlap[:, j, None])  # (labels, thresholds)
        best = free.argmax(axis=0)
        correct[j] = free[best, columns] >= thresholds
        claimed[best, columns] |= correct[j]
    return correct


def average_precision(recall: np.ndarray, precision: np.ndarray, method: str = "interp") -> float:
    """The area under one precision-recall curve (points in the order of falling score)."""
    if method not in METHODS:
        raise ConfigError(f"method={method!r}: give one of {', '.join(METHODS)}")
    last = recall[-1] if len(recall) else 1.0
    r = np.concatenate(([0.0], recall, [last], [1.0]))
    p = np.concatenate(([1.0], precision, [0.0], [0.0]))
    p = np.maximum.accumulate(p[::-1])[::-1]  # the envelope: the best precision at this recall or beyond
    if method == "interp":
        grid = np.linspace(0, 1, 101)
        values = np.interp(grid, r, p)
        return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(grid)))
    steps = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def ap_per_class(correct: np.ndarray, scores: np.ndarray, predicted: np.ndarray, labelled: np.ndarray,
                 method: str = "interp") -> tuple:
    """(classes, ap): the classes that have labels, sorted, and their AP at each threshold (classes,
    thresholds), from every detection's `correct` row, score and class, and every label's class."""
    order = np.argsort(-scores, kind="stable")
    correct, scores, predicted = correct[order], scores[order], predicted[order]
    classes, counts = np.unique(labelled, return_counts=True)
    ap = np.zeros((len(classes), correct.shape[1]))
    for k, (c, count) in enumerate(zip(classes, counts)):
        mine = predicted == c
        if not mine.any():
            continue
        tp = np.cumsum(correct[mine], axis=0)
        fp = np.cumsum(~correct[mine], axis=0)
        recall = tp / (count + 1e-16)
        precision = tp / (tp + fp)
        for t in range(correct.shape[1]):
            ap[k, t] = average_precision(recall[:, t], precision[:, t], method)
    return classes.astype(np.int64), ap


@dataclass(frozen=True)
class Result:
    classes: np.ndarray      # the labelled classes, sorted
    ap: np.ndarray           # (classes, thresholds)
    labels: np.ndarray       # labels per class
    pictures: int

    @property
    def ap50(self) -> np.ndarray:
        return self.ap[:, 0]

    @property
    def map50(self) -> float:
        return float(self.ap[:, 0].mean()) if len(self.ap) else 0.0

    @property
    def map50_95(self) -> float:
        return float(self.ap.mean()) if len(self.ap) else 0.0


@dataclass
class Evaluation:
    """Detections and labels gathered picture by picture; `result()` computes the AP of every class."""

    method: str = "interp"
    thresholds: np.ndarray = field(default_factory=lambda: IOU_THRESHOLDS.copy())
    _correct: list = field(default_factory=list)
    _scores: list = field(default_factory=list)
    _predicted: list = field(default_factory=list)
    _labelled: list = field(default_factory=list)

    def add(self, detections: Detections, boxes: np.ndarray, classes: np.ndarray) -> None:
        """One picture: its detections (best first) and its labelled boxes (xyxy, same pixels) and classes."""
        boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
        classes = np.asarray(classes, np.int64).reshape(-1)
        self._correct.append(match(detections, boxes, classes, self.thresholds))
        self._scores.append(detections.scores)
        self._predicted.append(detections.classes)
        self._labelled.append(classes)

    def result(self) -> Result:
        nt = len(self.thresholds)
        correct = np.concatenate(self._correct) if self._correct else np.zeros((0, nt), bool)
        scores = np.concatenate(self._scores) if self._scores else np.zeros(0, np.float32)
        predicted = np.concatenate(self._predicted) if self._predicted else np.zeros(0, np.int64)
        labelled = np.concatenate(self._labelled) if self._labelled else np.zeros(0, np.int64)
        classes, ap = ap_per_class(correct, scores, predicted, labelled, self.method)
        counts = np.array([(labelled == c).sum() for c in classes], dtype=np.int64)
        return Result(classes, ap, counts, len(self._labelled))
