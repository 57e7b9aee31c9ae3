"""Boxes as numpy arrays: the two layouts YOLO uses, and intersection over union.

A box is (x1, y1, x2, y2), corners in pixels (xyxy), or (cx, cy, w, h), its centre and size (xywh, what YOLO
heads predict). Areas are (x2 - x1) * (y2 - y1), without the "+ 1" of older pixel-inclusive conventions, as
torchvision and ultralytics count them.
"""

from __future__ import annotations

import numpy as np


def xywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """(..., 4) centre-size boxes to corners, in the array's own dtype (float32 stays float32)."""
    boxes = np.asarray(boxes)
    half = boxes[..., 2:4] / 2
    return np.concatenate([boxes[..., 0:2] - half, boxes[..., 0:2] + half], axis=-1)


def area(boxes: np.ndarray) -> np.ndarray:
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) intersection over union of every box of `a` (N, 4) with every box of `b` (M, 4), xyxy.
    Boxes that do not touch have 0; two empty boxes have 0 too (their union is 0)."""
    a, b = np.asarray(a), np.asarray(b)
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=-1)
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def clip(boxes: np.ndarray, width: float, height: float) -> np.ndarray:
    """xyxy boxes kept inside a width x height picture (a new array)."""
    return np.stack([np.clip(boxes[..., 0], 0, width), np.clip(boxes[..., 1], 0, height),
                     np.clip(boxes[..., 2], 0, width), np.clip(boxes[..., 3], 0, height)], axis=-1)
