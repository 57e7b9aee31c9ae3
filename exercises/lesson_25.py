"""Lesson 25: Detection post-processing. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 25`: its checkpoint calls these and compares the results with kuiper's own
implementation and with the results ultralytics and torchvision saved for the same boxes.
"""

import numpy as np


def iou(a, b):
    """Intersection over union of every box of `a` (N, 4) with every box of `b` (M, 4), both x1, y1, x2, y2:
    an (N, M) float array. Areas are (x2 - x1) * (y2 - y1); boxes that do not touch have 0, and so do two empty
    boxes (union 0). See course_notes/25-detection.md, exercise 1."""
    raise NotImplementedError('lesson 25: write iou() in exercises/lesson_25.py; '
                              'see course_notes/25-detection.md, exercise 1')


def nms(boxes, scores, iou_threshold: float):
    """Greedy non-maximum suppression: visit the boxes (N, 4) from the highest score down (ties: the lower index
    first); keep a box unless a box kept before it overlaps it with IoU above `iou_threshold`. Returns the kept
    indices, highest score first, as an int array. See course_notes/25-detection.md, exercise 2."""
    raise NotImplementedError('lesson 25: write nms() in exercises/lesson_25.py; '
                              'see course_notes/25-detection.md, exercise 2')


def letterbox_boxes(boxes, picture_shape, input_shape):
    """Boxes (N, 4) x1, y1, x2, y2 found in a letterboxed input of `input_shape` (height, width), mapped back to
    the picture of `picture_shape` (height, width) it was made from, clipped to the picture. The letterbox
    scaled the picture by r = min(input height / picture height, input width / picture width), rounded each
    scaled side to whole pixels, and centred it: left = round((input width - scaled width) / 2 - 0.1), top
    likewise. Undo the padding, then divide by each side's own gain, scaled side / picture side.
    See course_notes/25-detection.md, exercise 3."""
    raise NotImplementedError('lesson 25: write letterbox_boxes() in exercises/lesson_25.py; '
                              'see course_notes/25-detection.md, exercise 3')


def average_precision(recall, precision) -> float:
    """The AP of one precision-recall curve (points in the order of falling score), as COCO and ultralytics
    compute it: put (0, 1) before the points and (last recall, 0), (1, 0) after them; replace each precision by
    the largest at its recall or beyond (the envelope); sample that at the 101 recalls 0, 0.01, ..., 1 with
    np.interp; integrate the samples over recall by the trapezoid rule. See course_notes/25-detection.md,
    exercise 4."""
    raise NotImplementedError('lesson 25: write average_precision() in exercises/lesson_25.py; '
                              'see course_notes/25-detection.md, exercise 4')
