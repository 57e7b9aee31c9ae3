"""Detections drawn on a picture: a coloured frame per box, its class name and score on a filled tab above it.

Pillow's built-in font is used (no font file is read or fetched); each class has its own colour.
"""

from __future__ import annotations

import numpy as np

from kuiper.detection.detections import Detections

COLOURS = ((255, 56, 56), (72, 249, 10), (0, 194, 255), (255, 178, 29), (207, 210, 49), (146, 204, 23),
           (255, 55, 199), (52, 69, 147), (255, 112, 31), (132, 56, 255), (26, 147, 52), (0, 24, 236))


def colour(index: int) -> tuple:
    return COLOURS[index % len(COLOURS)]


def _text_colour(fill: tuple) -> tuple:
    """Black on light tabs, white on dark ones (by luma)."""
    return (0, 0, 0) if 0.299 * fill[0] + 0.587 * fill[1] + 0.114 * fill[2] > 140 else (255, 255, 255)


def draw(image, detections: Detections, names=None):
    """A copy of `image` (a PIL image, or (H, W, 3) uint8 RGB) with the detections drawn, as a PIL image."""
    from PIL import Image, ImageDraw, ImageFont

    picture = (image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))).convert("RGB")
    canvas = ImageDraw.Draw(picture)
    side = min(picture.size)
    line = max(1, round(side / 250))
    try:
        font = ImageFont.load_default(size=max(9, round(side / 40)))
    except TypeError:  # Pillow before 10.1 has only its small bitmap font
        font = ImageFont.load_default()
    for i in range(len(detections)):
        x1, y1, x2, y2 = (float(v) for v in detections.boxes[i])
        x1, x2, y1, y2 = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)  # a box turned inside out is drawn too
        fill = colour(int(detections.classes[i]))
        canvas.rectangle((x1, y1, x2, y2), outline=fill, width=line)
        text = f"{detections.name(i, names)} {float(detections.scores[i]):.2f}"
        left, top, right, bottom = canvas.textbbox((0, 0), text, font=font)
        w, h = right - left + 4, bottom - top + 4
        ty = y1 - h if y1 - h >= 0 else y1  # above the box, or inside it at the picture's top edge
        tx = max(0.0, min(x1, picture.width - w))  # kept inside the picture's right edge
        canvas.rectangle((tx, ty, tx + w, ty + h), fill=fill)
        canvas.text((tx + 2 - left, ty + 2 - top), text, fill=_text_colour(fill), font=font)
    return picture
