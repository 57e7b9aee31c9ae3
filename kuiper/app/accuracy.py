"""A classifier scored on a labelled folder: accuracy and a confusion matrix (`kuiper run --input DIR`).

A labelled folder follows torchvision's `ImageFolder` convention: one subfolder per class, named for it,
holding that class's images (at any depth below it):

    DIR/Coat/0001.png
    DIR/Sandal/0002.png ...

Each image's true class is its subfolder's name. With class names given (`--labels FILE`), a name's line in
that file is its class index, and every subfolder must be one of the names; without them the classes are the
subfolders' names sorted, as `ImageFolder` numbers them. The model's class for an image is its best score.

The confusion matrix counts images by true class (rows) and predicted class (columns): the diagonal holds
the right answers, and row r's other cells say which classes the model mistook class r for. It keeps only
the classes that some image has or was given, each with its index: a folder of three ImageNet classes
makes a small matrix, not one of 1000 x 1000.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiper.app.images import IMAGE_SUFFIXES, is_image
from kuiper.core.errors import ConfigError, ImageError

CELL = 30  # the plot's cell side, in pixels


@dataclass(frozen=True)
class Labelled:
    """The images of a labelled folder, sorted by class then path, each with its class index."""

    paths: list
    truths: list
    classes: list  # class names, by index


@dataclass(frozen=True)
class Report:
    indices: list  # the class indices kept, ascending
    classes: list  # their names
    matrix: np.ndarray  # (kept, kept) int64: rows the true class, columns the predicted one

    @property
    def images(self) -> int:
        return int(self.matrix.sum())

    @property
    def correct(self) -> int:
        return int(np.trace(self.matrix))

    @property
    def accuracy(self) -> float:
        return self.correct / self.images

    def recall(self) -> list:
        """Per class, the share of its images classified right (None for a class with no images)."""
        totals = self.matrix.sum(axis=1)
        return [None if t == 0 else float(self.matrix[c, c] / t) for c, t in enumerate(totals)]


def is_labelled(folder: Path) -> bool:
    """A folder of class subfolders: no images directly in it, and at least one subfolder."""
    entries = list(Path(folder).iterdir())
    return any(p.is_dir() for p in entries) and not any(p.is_file() and is_image(p) for p in entries)


def labelled_images(folder: Path, names=None) -> Labelled:
    """The images of a labelled folder and their classes (see the module docstring)."""
    subfolders = sorted(p for p in Path(folder).iterdir() if p.is_dir())
    classes = list(names) if names is not None else [p.name for p in subfolders]
    index = {name: i for i, name in enumerate(classes)}
    unknown = [p.name for p in subfolders if p.name not in index]
    if unknown:
        raise ConfigError(f"{folder}: subfolder(s) {', '.join(unknown)} are not among the {len(classes)} class "
                          f"names (a labelled folder's subfolders are named for their classes)")
    paths, truths = [], []
    for sub in subfolders:
        found = sorted(p for p in sub.rglob("*") if p.is_file() and is_image(p))
        paths += found
        truths += [index[sub.name]] * len(found)
    if not paths:
        raise ImageError(f"{folder}: no images in its class subfolders (looked for {' '.join(IMAGE_SUFFIXES)})")
    return Labelled(paths, truths, classes)


def confusion(truths, predicted, classes: list) -> Report:
    """The report over pairs of class indices (true, predicted); `classes` names every index."""
    truths, predicted = np.asarray(truths, np.int64), np.asarray(predicted, np.int64)
    if predicted.size and (predicted.min() < 0 or predicted.max() >= len(classes)):
        raise ConfigError(f"the model predicted class {int(predicted.max())}, but there are {len(classes)} "
                          f"classes: give the model's class names (--labels) so that its classes and the "
                          f"subfolders agree")
    kept = np.union1d(truths, predicted)
    n = len(kept)
    rows, cols = np.searchsorted(kept, truths), np.searchsorted(kept, predicted)
    matrix = np.bincount(rows * n + cols, minlength=n * n).reshape(n, n)
    return Report(kept.tolist(), [classes[i] for i in kept], matrix)


def as_dict(report: Report) -> dict:
    """For JSON: counts, accuracy, the class names, the matrix as lists (rows true, columns predicted) and
    each class's recall."""
    return {"images": report.images, "correct": report.correct, "accuracy": report.accuracy,
            "indices": report.indices, "classes": report.classes, "matrix": report.matrix.tolist(),
            "recall": report.recall()}


def table(report: Report) -> str:
    """The matrix as text: a row per true class (its index and name), a column per predicted class (its
    index), then each row's recall."""
    label = [f"{c} {name}" for c, name in zip(report.indices, report.classes)]
    left = max(len("true \\ predicted"), *map(len, label))
    width = max(3, len(str(int(report.matrix.max()))), *(len(str(c)) for c in report.indices))
    lines = ["true \\ predicted".ljust(left) + "".join(f" {c:>{width}}" for c in report.indices) + "  recall"]
    for c, recall in enumerate(report.recall()):
        cells = "".join(f" {v:>{width}}" for v in report.matrix[c])
        lines.append(label[c].ljust(left) + cells + ("       -" if recall is None else f"  {recall:6.1%}"))
    lines.append(f"accuracy {report.accuracy:.2%} ({report.correct} of {report.images} images)")
    return "\n".join(lines)


def plot(report: Report, path: Path) -> None:
    """The matrix as an image (PNG, or whatever Pillow writes for the suffix): cells shaded by the share of
    their row, so that a class with few images shows its mistakes as plainly as a large one; the counts in
    the cells, the class names beside the rows and above the columns, the accuracy as the title."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    n = len(report.classes)
    names = [f"{c} {name}" for c, name in zip(report.indices, report.classes)]
    measure = ImageDraw.Draw(Image.new("L", (1, 1)))
    name_width = max(int(measure.textlength(name, font=font)) for name in names) + 8
    title_height, margin = 24, 8
    left, top = margin + name_width, title_height + name_width
    image = Image.new("RGB", (left + n * CELL + margin, top + n * CELL + margin), "white")
    draw = ImageDraw.Draw(image)
    draw.text((margin, margin), f"accuracy {report.accuracy:.2%} ({report.correct}/{report.images}); "
              "rows: true, columns: predicted", fill="black", font=font)
    totals = np.maximum(report.matrix.sum(axis=1, keepdims=True), 1)
    shares = report.matrix / totals
    for r in range(n):
        draw.text((margin, top + r * CELL + CELL // 2), names[r], fill="black", font=font, anchor="lm")
        for c in range(n):
            x, y = left + c * CELL, top + r * CELL
            shade = int(255 * (1 - shares[r, c]))
            draw.rectangle((x, y, x + CELL - 1, y + CELL - 1), fill=(shade, shade, 255), outline=(200, 200, 200))
            if report.matrix[r, c]:
                ink = "white" if shares[r, c] > 0.5 else "black"
                draw.text((x + CELL // 2, y + CELL // 2), str(report.matrix[r, c]), fill=ink, font=font,
                          anchor="mm")
    # column names: written across, then turned to read upwards from the top of their columns
    for c, name in enumerate(names):
        label = Image.new("L", (name_width, CELL), 255)
        ImageDraw.Draw(label).text((4, CELL // 2), name, fill=0, font=font, anchor="lm")
        upright = label.rotate(90, expand=True)
        image.paste(Image.merge("RGB", [upright] * 3), (left + c * CELL, title_height))
    image.save(path)
