"""A model's own image preparation: `preprocess.json` beside its .pnnx.param.

A model trained on other pictures than ImageNet's wants other numbers than kuiper's defaults
(kuiper/app/images.py). Its directory may say them once, for `kuiper run` and kuiper/app/ray_data.py to use
whenever the model reads images:

    {"resize": 28, "crop": 28, "mean": 0.286, "std": 0.353, "channels": 1, "labels": "labels.txt"}

Every key is optional. `resize`, `crop`: pixels (whole numbers, at least 1). `mean`, `std`: one number, or
one per channel (std above 0). `channels`: 1 (grayscale) or 3 (RGB); by default what the model's input
shape says. `labels`: the class names' file, relative to the JSON file. What is left out keeps kuiper's
default for the model's input; what the command line gives (`--resize`, `--crop`, `--mean`, `--std`,
`--labels`) overrides the file. A file that cannot be used is an error naming the file and the key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from kuiper.app.images import CHANNELS, Preprocess
from kuiper.core.errors import ConfigError

FILE_NAME = "preprocess.json"
KEYS = ("resize", "crop", "mean", "std", "channels", "labels")


@dataclass(frozen=True)
class ModelPreprocess:
    """What a preprocess.json gives: Preprocess fields (mean and std as tuples of one or more numbers) and
    the class names' file."""

    path: Path
    fields: dict
    labels: Path | None

    def applied_to(self, base: Preprocess) -> Preprocess:
        """`base` (the defaults for the model's input) with the file's values; one mean or std number is
        every channel's."""
        fields = dict(self.fields)
        channels = fields.pop("channels", base.channels)
        if channels != base.channels:  # the other kind of image: that kind's default statistics
            base = Preprocess.grayscale(resize=base.resize, crop=base.crop) if channels == 1 else \
                Preprocess(resize=base.resize, crop=base.crop)
        for key in ("mean", "std"):
            values = fields.get(key)
            if values is not None and len(values) != channels:
                if len(values) != 1:
                    raise ConfigError(f"{self.path}: \"{key}\" has {len(values)} numbers, the images have "
                                      f"{channels} channel(s): give one number or {channels}")
                fields[key] = values * channels
        try:
            return replace(base, **fields)
        except ConfigError as e:
            raise ConfigError(f"{self.path}: {e}") from None


def input_channels(graph):
    """The channels of the graph's one input, where its .param says them (else None)."""
    if len(graph.input_operators) != 1:
        return None
    shape = graph.input_operators[0].output_operand.shape
    return shape[1] if shape is not None and len(shape) == 4 and isinstance(shape[1], int) else None


def for_graph(param, graph) -> tuple:
    """(Preprocess, class names' file or None) for images into `graph`'s one input: kuiper's defaults for
    its shape with what the preprocess.json beside `param` says."""
    base = Preprocess.for_shape(graph.input_operators[0].output_operand.shape)
    own = read(param, input_channels(graph))
    return (base, None) if own is None else (own.applied_to(base), own.labels)


def find(param) -> Path | None:
    """The preprocess.json beside `param`, if there is one."""
    path = Path(param).with_name(FILE_NAME)
    return path if path.is_file() else None


def read(param, input_channels=None) -> ModelPreprocess | None:
    """The preprocess.json beside `param`, checked (None where there is none); `input_channels`: what the
    model's input shape says, which the file's "channels" must agree with."""
    path = find(param)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: give a JSON object of {', '.join(KEYS)}")
    unknown = [key for key in data if key not in KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown key \"{unknown[0]}\" (the keys are {', '.join(KEYS)})")
    fields = {}
    for key in ("resize", "crop"):
        if key in data:
            value = data[key]
            if type(value) is not int or value < 1:
                raise ConfigError(f"{path}: \"{key}\" is {json.dumps(value)}: give a whole number of pixels, at "
                                  f"least 1")
            fields[key] = value
    if "channels" in data:
        value = data["channels"]
        if type(value) is not int or value not in CHANNELS:
            raise ConfigError(f"{path}: \"channels\" is {json.dumps(value)}: give 1 (grayscale) or 3 (RGB)")
        if input_channels is not None and value != input_channels:
            raise ConfigError(f"{path}: \"channels\" is {value}, but the model's input has {input_channels}")
        fields["channels"] = value
    for key in ("mean", "std"):
        if key in data:
            fields[key] = _numbers(path, key, data[key])
    labels = None
    if "labels" in data:
        if not isinstance(data["labels"], str) or not data["labels"]:
            raise ConfigError(f"{path}: \"labels\" is {json.dumps(data['labels'])}: give the class names' file, "
                              f"relative to {path.parent}")
        labels = path.parent / data["labels"]
        if not labels.is_file():
            raise ConfigError(f"{path}: \"labels\": no file {labels}")
    return ModelPreprocess(path, fields, labels)


def _numbers(path: Path, key: str, value) -> tuple:
    values = value if isinstance(value, list) else [value]
    good = values and all(type(v) in (int, float) and math.isfinite(v) for v in values) and \
        (key == "mean" or all(v > 0 for v in values))
    if not good:
        what = "finite numbers" if key == "mean" else "numbers above 0 (it divides)"
        raise ConfigError(f"{path}: \"{key}\" is {json.dumps(value)}: give one number or a list of them, "
                          f"{what}")
    return tuple(float(v) for v in values)
