"""Lesson 25: Detection post-processing. Reference solutions."""

import numpy as np


def iou(a, b):
    """Intersection over union of every box of `a` (N, 4) with every box of `b` (M, 4), both x1, y1, x2, y2:
    an (N, M) float array. Areas are (x2 - x1) * (y2 - y1); boxes that do not touch have 0, and so do two empty
    boxes (union 0). See course_notes/25-detection.md, exercise 1."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    union = ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))[:, None] + ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[None]
    union = union - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def nms(boxes, scores, iou_threshold: float):
    """Greedy non-maximum suppression: visit the boxes (N, 4) from the highest score down (ties: the lower index
    first); keep a box unless a box kept before it overlaps it with IoU above `iou_threshold`. Returns the kept
    indices, highest score first, as an int array. See course_notes/25-detection.md, exercise 2."""
    boxes, scores = np.asarray(boxes, np.float64), np.asarray(scores)
    keep = []
    for i in np.argsort(-scores, kind="stable"):
        if not keep or iou(boxes[i:i + 1], boxes[keep]).max() <= iou_threshold:
            keep.append(int(i))
    return np.asarray(keep, dtype=np.int64)


def letterbox_boxes(boxes, picture_shape, input_shape):
    """Boxes (N, 4) x1, y1, x2, y2 found in a letterboxed input of `input_shape` (height, width), mapped back to
    the picture of `picture_shape` (height, width) it was made from, clipped to the picture. The letterbox
    scaled the picture by r = min(input height / picture height, input width / picture width), rounded each
    scaled side to whole pixels, and centred it: left = round((input width - scaled width) / 2 - 0.1), top
    likewise. Undo the padding, then divide by each side's own gain, scaled side / picture side.
    See course_notes/25-detection.md, exercise 3."""
    boxes = np.array(boxes, np.float64)
    (h, w), (ih, iw) = picture_shape, input_shape
    r = min(ih / h, iw / w)
    sw, sh = max(round(w * r), 1), max(round(h * r), 1)
    left, top = round((iw - sw) / 2 - 0.1), round((ih - sh) / 2 - 0.1)
    boxes[:, [0, 2]] = np.clip((boxes[:, [0, 2]] - left) / (sw / w), 0, w)
    boxes[:, [1, 3]] = np.clip((boxes[:, [1, 3]] - top) / (sh / h), 0, h)
    return boxes


def average_precision(recall, precision) -> float:
    """The AP of one precision-recall curve (points in the order of falling score), as COCO and ultralytics
    compute it: put (0, 1) before the points and (last recall, 0), (1, 0) after them; replace each precision by
    the largest at its recall or beyond (the envelope); sample that at the 101 recalls 0, 0.01, ..., 1 with
    np.interp; integrate the samples over recall by the trapezoid rule. See course_notes/25-detection.md,
    exercise 4."""
    recall, precision = np.asarray(recall, np.float64), np.asarray(precision, np.float64)
    r = np.concatenate(([0.0], recall, [recall[-1] if len(recall) else 1.0, 1.0]))
    p = np.concatenate(([1.0], precision, [0.0, 0.0]))
    p = np.maximum.accumulate(p[::-1])[::-1]
    grid = np.linspace(0, 1, 101)
    values = np.interp(grid, r, p)
    return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(grid)))
