"""Letterboxing: a picture resized to fit a detector's input without changing its aspect ratio, the rest of the
input filled with grey, and the way back for the boxes found in it.

    lb = letterbox(pixels, (160, 160))     # pixels: (height, width, 3) uint8 RGB
    x = lb.input()                          # (1, 3, 160, 160) float32 in [0, 1]
    boxes = lb.to_original(boxes_in_input)  # xyxy in the picture's own pixels

The numbers are ultralytics': the scale is the largest that fits both sides (never above 1 with
`scaleup=False`), each resized side is rounded (and at least 1), the padding is split between the two ends
(the extra pixel of an odd padding going to the bottom or right), and the fill is grey 114. With `auto`, the
input is only padded up to the next multiple of `stride` on each side instead of to `shape`. The resizing is
Pillow's bilinear one (ultralytics uses OpenCV's), so the input pixels may differ by a few levels from theirs
where the picture is scaled; a picture that already fits is only padded, and then they agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiper.core.errors import ConfigError, ImageError
from kuiper.detection.boxes import clip

FILL = 114


@dataclass(frozen=True)
class Letterbox:
    """A letterboxed picture: `image` (H, W, 3) uint8, `gain` (x, y) from the picture's pixels to the input's,
    `pad` (left, top) in input pixels, `original` (height, width) of the picture."""

    image: np.ndarray
    gain: tuple
    pad: tuple
    original: tuple

    def input(self) -> np.ndarray:
        """The letterboxed picture as a detector takes it: (1, 3, H, W) float32, values / 255."""
        x = self.image.astype(np.float32) / np.float32(255.0)
        return np.ascontiguousarray(x.transpose(2, 0, 1)[None])

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in input pixels to the picture's pixels, clipped to it (ultralytics' scale_boxes)."""
        boxes = np.asarray(boxes, dtype=np.float32)
        (gx, gy), (left, top) = self.gain, self.pad
        scale = np.asarray([gx, gy, gx, gy], np.float32)
        shift = np.asarray([left, top, left, top], np.float32)
        return clip((boxes - shift) / scale, self.original[1], self.original[0]).astype(np.float32)

    def to_input(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in the picture's pixels to input pixels (how labels follow the picture in)."""
        (gx, gy), (left, top) = self.gain, self.pad
        return np.asarray(boxes, np.float32) * np.asarray([gx, gy, gx, gy], np.float32) + \
            np.asarray([left, top, left, top], np.float32)


def _size(shape) -> tuple:
    height, width = (shape, shape) if isinstance(shape, int) else tuple(shape)
    if not all(isinstance(v, (int, np.integer)) and v >= 1 for v in (height, width)):
        raise ConfigError(f"letterbox shape {shape!r}: give (height, width) in whole pixels, at least 1")
    return int(height), int(width)


def letterbox(image: np.ndarray, shape=640, stride: int = 32, auto: bool = False, scaleup: bool = True,
              fill: int = FILL) -> Letterbox:
    """`image` (H, W, 3) uint8 letterboxed into `shape` (an int for a square, or (height, width))."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or 0 in image.shape:
        raise ImageError(f"letterbox takes a picture as (height, width, 3) uint8: got {image.dtype} "
                         f"{tuple(image.shape)}")
    new_h, new_w = _size(shape)
    h, w = image.shape[:2]
    r = min(new_h / h, new_w / w)
    if not scaleup:
        r = min(r, 1.0)
    resized_w, resized_h = max(round(w * r), 1), max(round(h * r), 1)
    dw, dh = new_w - resized_w, new_h - resized_h
    if auto:  # the smallest stride multiple that holds the resized picture
        dw, dh = dw % stride, dh % stride
    left, top = round(dw / 2 - 0.1), round(dh / 2 - 0.1)
    if (resized_w, resized_h) != (w, h):
        from PIL import Image

        image = np.asarray(Image.fromarray(image).resize((resized_w, resized_h), Image.Resampling.BILINEAR))
    out = np.full((resized_h + dh, resized_w + dw, 3), fill, dtype=np.uint8)
    out[top:top + resized_h, left:left + resized_w] = image
    return Letterbox(out, (resized_w / w, resized_h / h), (left, top), (h, w))
