"""Non-maximum suppression: of boxes that overlap, keep the best-scoring one.

`nms` is the greedy algorithm torchvision.ops.nms implements: visit the boxes from the highest score down, keep
each box that no kept box overlaps by more than `iou` (IoU strictly above the threshold suppresses). It works in
the boxes' float32, as torchvision's CPU kernel does, so that the same boxes give the same decision even at the
last bit.

`non_max_suppression` is what a YOLO model's decoded boxes go through before they become detections, as
ultralytics does it: drop boxes whose best class score is not above `conf`; give each box its best class (or,
with `multi_label`, one row per class above `conf`); move each class's boxes `max_wh` pixels apart per class
index, so that one `nms` call never lets a box of one class suppress another class's (class-wise NMS in a
single pass); keep at most `max_det`, best first.
"""

from __future__ import annotations

import numpy as np

from kuiper.core.errors import ConfigError
from kuiper.detection.boxes import area
from kuiper.detection.detections import Detections

MAX_WH = 7680   # the per-class offset, in pixels: larger than any picture a detector is given
MAX_NMS = 30000  # at most this many boxes (the best) go into nms


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Indices of the kept boxes (N, 4 xyxy), highest score first."""
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    areas = area(boxes)
    suppressed = np.zeros(len(boxes), dtype=bool)
    keep = []
    for rank, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[rank + 1:]
        rest = rest[~suppressed[rest]]
        if not len(rest):
            break
        w = np.maximum(np.float32(0), np.minimum(boxes[i, 2], boxes[rest, 2]) - np.maximum(boxes[i, 0], boxes[rest, 0]))
        h = np.maximum(np.float32(0), np.minimum(boxes[i, 3], boxes[rest, 3]) - np.maximum(boxes[i, 1], boxes[rest, 1]))
        inter = w * h
        overlap = inter / (areas[i] + areas[rest] - inter)
        # compared in double, as torchvision compares its float IoU with the double threshold
        suppressed[rest[overlap.astype(np.float64) > iou]] = True
    return np.asarray(keep, dtype=np.int64)


def batched_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> np.ndarray:
    """`nms` within each class separately (torchvision.ops.batched_nms): indices kept, highest score first."""
    boxes = np.asarray(boxes, dtype=np.float32)
    if not len(boxes):
        return np.zeros(0, dtype=np.int64)
    # every class's boxes moved beyond all others' reach, as torchvision does it
    offset = np.asarray(classes, dtype=np.float32)[:, None] * (boxes.max() + np.float32(1))
    return nms(boxes + offset, scores, iou)


def check_thresholds(conf: float, iou: float) -> None:
    for name, value in (("conf", conf), ("iou", iou)):
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name}={value!r}: give a threshold between 0 and 1")


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, conf: float = 0.25, iou: float = 0.45,
                        max_det: int = 300, multi_label: bool = False, agnostic: bool = False,
                        classes=None) -> Detections:
    """Detections from one image's decoded boxes (N, 4 xyxy) and class scores (N, C), best first (see the
    module docstring); `classes`, when given, keeps only those class indices."""
    check_thresholds(conf, iou)
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    candidate = scores.max(axis=1) > conf if scores.shape[1] else np.zeros(len(scores), dtype=bool)
    boxes, scores = boxes[candidate], scores[candidate]
    if multi_label and scores.shape[1] > 1:
        rows, labels = np.nonzero(scores > conf)
        boxes, best = boxes[rows], scores[rows, labels]
    else:
        labels = scores.argmax(axis=1) if len(scores) else np.zeros(0, dtype=np.int64)
        best = scores[np.arange(len(scores)), labels]
        kept = best > conf
        boxes, best, labels = boxes[kept], best[kept], labels[kept]
    if classes is not None:
        kept = np.isin(labels, np.asarray(classes))
        boxes, best, labels = boxes[kept], best[kept], labels[kept]
    if len(best) > MAX_NMS:
        top = np.argsort(-best, kind="stable")[:MAX_NMS]
        boxes, best, labels = boxes[top], best[top], labels[top]
    offset = np.float32(0) if agnostic else labels.astype(np.float32)[:, None] * np.float32(MAX_WH)
    keep = nms(boxes + offset, best, iou)[:max_det]
    return Detections(boxes[keep], best[keep], labels[keep].astype(np.int64))
