"""A synthetic detection data set: coloured shapes on noisy, cluttered backgrounds, in ultralytics' YOLO format.

    python tools/synthetic_shapes.py OUT [--train 2000] [--val 200] [--test 200] [--seed 0]

Needs only numpy and Pillow. Every picture is 160 x 120 (landscape) or 120 x 160 (portrait), so a 160 x 160
letterbox pads it without resizing; it holds one to five shapes of four classes (circle, square, triangle,
cross) in random colours and sizes (12 to 56 pixels), which overlap each other little, on a background of
smooth colour gradients, noise and faint lines. Into OUT/ it writes

    images/<split>/NNNNN.png         the pictures (PNG: every decoder reads the same pixels)
    labels/<split>/NNNNN.txt         one line per shape: class cx cy w h, as fractions of the picture's size
    data.yaml                        the split folders and class names, as `ultralytics` trains from it

Each split comes from its own seed (seed, seed + 1, seed + 2), so the test pictures are never trained on.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

CLASSES = ("circle", "square", "triangle", "cross")
LONG, SHORT = 160, 120
PALETTE = ((220, 40, 40), (40, 170, 60), (40, 80, 220), (235, 200, 30), (200, 60, 200), (30, 200, 210),
           (245, 130, 20), (250, 250, 250), (20, 20, 20))


def background(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A smooth two-colour gradient at a random angle, per-pixel noise, then a few faint lines."""
    a, b = rng.uniform(40, 215, size=(2, 3))
    angle = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = (xx * math.cos(angle) + yy * math.sin(angle))
    t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
    pixels = a + (b - a) * t[..., None] + rng.normal(0, rng.uniform(4, 18), size=(height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.integers(0, 6)):
        colour = tuple(int(c) for c in rng.uniform(40, 215, size=3))
        points = [(float(rng.uniform(0, width)), float(rng.uniform(0, height))) for _ in range(2)]
        draw.line(points, fill=colour, width=int(rng.integers(1, 3)))
    return image.filter(ImageFilter.GaussianBlur(0.6))


def draw_shape(draw: ImageDraw.ImageDraw, kind: int, box: tuple, colour: tuple, rng: np.random.Generator) -> tuple:
    """Draws shape `kind` inside `box` (x1, y1, x2, y2) and returns the box it really covers."""
    x1, y1, x2, y2 = box
    if kind == 0:
        draw.ellipse(box, fill=colour)
    elif kind == 1:
        draw.rectangle(box, fill=colour)
    elif kind == 2:
        points = [((x1 + x2) / 2, y1), (x2, y2), (x1, y2)]
        if rng.random() < 0.5:  # pointing down
            points = [((x1 + x2) / 2, y2), (x2, y1), (x1, y1)]
        draw.polygon(points, fill=colour)
    else:
        w, h = x2 - x1, y2 - y1
        bar = max(3.0, min(w, h) / 3)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        draw.rectangle((x1, cy - bar / 2, x2, cy + bar / 2), fill=colour)
        draw.rectangle((cx - bar / 2, y1, cx + bar / 2, y2), fill=colour)
    # Pillow fills both end pixels of a shape, so it covers up to x2 + 1 and y2 + 1
    return x1, y1, x2 + 1, y2 + 1


def overlap(a: tuple, b: tuple) -> float:
    """Intersection over the smaller box's area."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    return w * h / min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))


def make_image(rng: np.random.Generator) -> tuple[Image.Image, list[tuple[int, float, float, float, float]]]:
    """One picture and its shapes as (class, x1, y1, x2, y2) in pixels."""
    width, height = (LONG, SHORT) if rng.random() < 0.75 else (SHORT, LONG)
    image = background(rng, width, height)
    draw = ImageDraw.Draw(image)
    shapes: list[tuple[int, float, float, float, float]] = []
    for _ in range(int(rng.integers(1, 6))):
        for _attempt in range(20):
            kind = int(rng.integers(len(CLASSES)))
            size = int(rng.integers(12, 57))
            w = size if kind in (0, 1) or rng.random() < 0.5 else int(size * rng.uniform(0.7, 1.3))
            h = size if kind == 1 else int(size * rng.uniform(0.8, 1.2)) if kind != 0 else w
            w, h = min(w, width - 2), min(h, height - 2)
            x1 = int(rng.integers(0, width - w))
            y1 = int(rng.integers(0, height - h))
            box = (x1, y1, x1 + w - 1, y1 + h - 1)
            if all(overlap(box, s[1:]) < 0.25 for s in shapes):
                colour = PALETTE[int(rng.integers(len(PALETTE)))]
                shapes.append((kind, *draw_shape(draw, kind, box, colour, rng)))
                break
    return image, shapes


def yolo_lines(shapes: list, width: int, height: int) -> str:
    return "".join(f"{k} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} {(x2 - x1) / width:.6f} "
                   f"{(y2 - y1) / height:.6f}\n" for k, x1, y1, x2, y2 in shapes)


def write_split(root: Path, split: str, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    (root / "labels" / split).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        image, shapes = make_image(rng)
        image.save(root / "images" / split / f"{i:05d}.png")
        (root / "labels" / split / f"{i:05d}.txt").write_text(yolo_lines(shapes, *image.size))


def write_dataset(root: Path, counts: dict[str, int], seed: int = 0) -> Path:
    """Writes the splits named in `counts` and data.yaml; returns data.yaml's path."""
    root = Path(root).resolve()
    for offset, (split, count) in enumerate(counts.items()):
        write_split(root, split, count, seed + offset)
    lines = [f"path: {root}"] + [f"{split}: images/{split}" for split in counts]
    lines.append("names:")
    lines += [f"  {i}: {name}" for i, name in enumerate(CLASSES)]
    (root / "data.yaml").write_text("\n".join(lines) + "\n")
    return root / "data.yaml"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--val", type=int, default=200)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_dataset(args.out, {"train": args.train, "val": args.val, "test": args.test}, args.seed))


if __name__ == "__main__":
    main()
