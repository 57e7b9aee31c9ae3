"""Images in, arrays out: the preprocessing ImageNet classifiers were trained with.

torchvision's classifiers (and most models trained on ImageNet) expect what its evaluation transform makes of a
picture, and `Preprocess()` does the same by default:

1. turn the picture upright as its EXIF orientation says (phone photos are often stored on their side), and
   make it RGB: grayscale is repeated over the three channels, an alpha channel is dropped, a palette is
   looked up;
2. resize it so that its short side is `resize` (256) pixels, keeping the aspect ratio (bilinear, with
   Pillow's antialiasing, as torchvision's `Resize` does on a PIL image);
3. cut the centred `crop` x `crop` (224 x 224) square out of it;
4. scale the 8-bit values to [0, 1] and normalise each channel: (x - mean) / std, with ImageNet's statistics;
5. lay it out as NCHW float32: (1, 3, crop, crop).

A model trained otherwise wants other numbers (`kuiper run --resize --crop --mean --std`); one fed raw pixels
in [0, 1] wants mean 0 and std 1. A model whose input has one channel (trained on grayscale pictures, as
Fashion-MNIST's) gets the picture as grayscale instead of RGB in step 1, with Pillow's luma
(0.299 R + 0.587 G + 0.114 B, as torchvision's `Grayscale`), and one mean and std: (1, 1, crop, crop).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiper.core.errors import ConfigError, ImageError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CHANNELS = (1, 3)  # grayscale or RGB
# what `kuiper run --input FOLDER` reads; compared without case (.JPG is a JPEG too)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclass(frozen=True)
class Preprocess:
    """How an image becomes a model input; the defaults are torchvision's ImageNet evaluation transform."""

    resize: int = 256   # the short side after resizing, in pixels
    crop: int = 224     # the side of the centred square cut out of that
    mean: tuple = IMAGENET_MEAN  # per channel (R, G, B), on values scaled to [0, 1]
    std: tuple = IMAGENET_STD
    channels: int = 3   # 3: RGB; 1: grayscale, with one mean and std

    def __post_init__(self):
        for name in ("resize", "crop"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r}: give a whole number of pixels, at least 1")
        if self.crop > self.resize:
            raise ConfigError(f"crop={self.crop} is larger than resize={self.resize}: the crop must fit in the "
                              f"resized image")
        if self.channels not in CHANNELS:
            raise ConfigError(f"channels={self.channels!r}: images are read as grayscale (1) or RGB (3)")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if len(value) != self.channels or not all(np.isfinite(v) for v in value):
                what = "three finite numbers, one per channel (R, G, B)" if self.channels == 3 else \
                    "one finite number (the image is grayscale)"
                raise ConfigError(f"{name}={value!r}: give {what}")
        if not all(v > 0 for v in self.std):
            raise ConfigError(f"std={self.std!r}: every channel's std must be above 0 (it divides)")

    @classmethod
    def for_input(cls, size: int) -> "Preprocess":
        """The defaults scaled to a model that takes size x size images (inception_v3: 299, resized to 342),
        keeping ImageNet's ratio of crop to resize, 224 / 256."""
        return cls(resize=round(size * 256 / 224), crop=size)

    @classmethod
    def grayscale(cls, **changes) -> "Preprocess":
        """For a model of one input channel: by default the average of ImageNet's statistics over the
        three channels, the mean and std of the grayscale pictures it would make."""
        mean, std = (round(float(np.mean(IMAGENET_MEAN)), 3),), (round(float(np.mean(IMAGENET_STD)), 3),)
        return cls(**{"mean": mean, "std": std, "channels": 1, **changes})

    @classmethod
    def for_shape(cls, shape) -> "Preprocess":
        """The defaults for a model input of this NCHW shape (as its .param records it, None where unknown):
        grayscale when it has one channel; scaled by `for_input` when it fixes a square of another side than
        224."""
        known = shape is not None and len(shape) == 4
        side = shape[2] if known and shape[2] == shape[3] else None
        base = cls.for_input(side) if isinstance(side, int) and side != 224 else cls()
        if known and shape[1] == 1:
            return cls.grayscale(resize=base.resize, crop=base.crop)
        return base


def _pillow():
    try:
        from PIL import Image, ImageOps
    except ImportError:
        raise ImageError("reading images needs Pillow: pip install \"kuiper[image]\"") from None
    return Image, ImageOps


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def find_images(folder: Path) -> list:
    """The images directly in `folder` (by suffix, IMAGE_SUFFIXES), sorted by name."""
    found = sorted(p for p in Path(folder).iterdir() if p.is_file() and is_image(p))
    if not found:
        raise ImageError(f"{folder}: no images in this folder (looked for {' '.join(IMAGE_SUFFIXES)})")
    return found


def load_image(path, pre: Preprocess = Preprocess(), data: bytes | None = None) -> np.ndarray:
    """One image as a (1, channels, crop, crop) float32 array, prepared as `pre` says (see the module
    docstring). `data`: the file's contents when they were read already; `path` then only names it."""
    return to_array(read_picture(path, "RGB" if pre.channels == 3 else "L", data), pre)


def read_picture(path, mode: str = "RGB", data: bytes | None = None):
    """Step 1 of the module docstring: the image at `path` (or in `data`, its contents) upright, as a PIL image
    of `mode` (RGB or L)."""
    Image, ImageOps = _pillow()
    try:
        with Image.open(path if data is None else io.BytesIO(data)) as opened:
            image = ImageOps.exif_transpose(opened)
            if image.mode == "P":  # a palette may carry alpha values, which Pillow wants to go through RGBA
                image = image.convert("RGBA")
            return image.convert(mode)
    # what Pillow raises for a file it cannot decode (truncated, not an image, absurdly large)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ImageError(f"{path}: cannot read it as an image ({e})") from None


def to_array(image, pre: Preprocess = Preprocess()) -> np.ndarray:
    """Steps 2-5 of the module docstring on an RGB PIL image (a grayscale one when `pre.channels` is 1)."""
    Image, _ = _pillow()
    width, height = image.size
    # the short side becomes `resize`; the long side is truncated as torchvision's Resize does
    if width <= height:
        size = (pre.resize, int(pre.resize * height / width))
    else:
        size = (int(pre.resize * width / height), pre.resize)
    image = image.resize(size, Image.Resampling.BILINEAR)
    # centred, with torchvision's rounding when the margin is odd
    left = int(round((size[0] - pre.crop) / 2.0))
    top = int(round((size[1] - pre.crop) / 2.0))
    image = image.crop((left, top, left + pre.crop, top + pre.crop))
    x = np.asarray(image, dtype=np.float32).reshape(pre.crop, pre.crop, -1) / np.float32(255.0)  # HWC
    x = (x - np.asarray(pre.mean, np.float32)) / np.asarray(pre.std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])
