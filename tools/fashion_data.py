"""Fashion-MNIST as Debian's dataset-fashion-mnist installs it, read with numpy alone (no torch), for
tools/train_fashion.py and tools/fashion_accuracy.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

DATA = Path("/usr/share/datasets/fashion-mnist")
PACKAGE = {"name": "dataset-fashion-mnist", "licence": "MIT",
           "source": "https://github.com/zalandoresearch/fashion-mnist"}
# Zalando's names; '/' and ' ' are replaced so that each is also a folder name
CLASSES = ("T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot")


def read_idx(path: Path) -> np.ndarray:
    """An idx file (gzip'd): a magic number whose last byte is the number of dimensions, the dimensions as
    big-endian uint32, then the values as uint8."""
    data = gzip.decompress(path.read_bytes())
    ndim = data[3]
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", ndim, offset=4))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(split: str) -> tuple:
    """(images (N, 28, 28) uint8, labels (N,) int64) of "train" or "t10k"."""
    images = read_idx(DATA / f"{split}-images-idx3-ubyte.gz")
    labels = read_idx(DATA / f"{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return images, labels
