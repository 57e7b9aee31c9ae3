"""Reading the output of a YOLO model exported by pnnx: boxes and class scores for every anchor.

Two layouts exist, told apart by the output's shape (or named with `format=`):

    "yolov8"  (batch, 4 + classes, anchors): ultralytics' anchor-free head (YOLOv8, YOLOv5u, YOLO11, ...). For
              each anchor: the box's centre x, y, width and height in input pixels, then one score per class,
              already through a sigmoid. The channels are the short side: 84 rows for COCO's 80 classes, 8400
              anchors at 640 x 640.
    "yolov5"  (batch, anchors, 5 + classes): the classic YOLOv5 head. For each anchor a row of cx, cy, w, h, an
              objectness score, then the class probabilities; a class's score is objectness x probability.

Either way `decode` returns, per image, the boxes as corners (anchors, 4) and the scores (anchors, classes).
"""

from __future__ import annotations

import numpy as np

from kuiper.core.errors import ConfigError, ShapeError
from kuiper.detection.boxes import xywh_to_xyxy

FORMATS = ("yolov8", "yolov5")


def detect_format(shape, classes: int | None = None) -> str:
    """The layout of an output of this shape (see the module docstring): by the number of classes when it is
    known, else by which side is the shorter (there are more anchors than channels)."""
    if len(shape) != 3:
        raise ShapeError(f"a YOLO output is (batch, channels, anchors) or (batch, anchors, channels): got shape "
                         f"{tuple(shape)}")
    if classes is not None:
        if shape[1] == 4 + classes:
            return "yolov8"
        if shape[2] == 5 + classes:
            return "yolov5"
        raise ShapeError(f"a YOLO output for {classes} classes has {4 + classes} channels (yolov8) or "
                         f"{5 + classes} (yolov5): got shape {tuple(shape)}")
    if shape[1] <= shape[2] and shape[1] >= 5:
        return "yolov8"
    if shape[2] >= 6:
        return "yolov5"
    raise ShapeError(f"shape {tuple(shape)} is no YOLO output: it needs at least 4 box channels and one class")


def classes_in(shape, format: str) -> int:
    return shape[1] - 4 if format == "yolov8" else shape[2] - 5


def decode(output: np.ndarray, format: str | None = None, classes: int | None = None) -> list:
    """[(boxes (anchors, 4) xyxy float32, scores (anchors, classes) float32) for each image] of a YOLO output."""
    output = np.asarray(output, dtype=np.float32)
    if format is None:
        format = detect_format(output.shape, classes)
    elif format not in FORMATS:
        raise ConfigError(f"format={format!r}: give one of {', '.join(FORMATS)}")
    elif output.ndim != 3:
        detect_format(output.shape)  # says what a YOLO output's shape is
    if classes is not None and classes_in(output.shape, format) != classes:
        raise ShapeError(f"a {format} output of shape {tuple(output.shape)} has {classes_in(output.shape, format)} "
                         f"classes, not {classes}")
    if classes_in(output.shape, format) < 1:
        raise ShapeError(f"a {format} output of shape {tuple(output.shape)} has no class scores")
    decoded = []
    for rows in output:
        if format == "yolov8":
            rows = rows.T  # (anchors, 4 + classes)
            scores = rows[:, 4:]
        else:
            scores = rows[:, 5:] * rows[:, 4:5]
        decoded.append((xywh_to_xyxy(rows[:, :4]), np.ascontiguousarray(scores)))
    return decoded
