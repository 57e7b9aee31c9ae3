"""Choosing a layer's kernel variant (kuiper/core/variants.py) per input shape on OpenCL: by rule, or by measurement.

Which way of splitting a layer's work over work-items runs fastest depends on the shape and on the device: a
BatchNorm over 512 planes of 7x7 pixels wants another kernel than one over 16 planes of 224x224, and a CPU
another than a GPU. A layer that offers several ways lists them as `Variant`s (a name, how to build its
kernel, how to launch it) in a `Variants`, its `variants` attribute. When the graph makes the plan for an
input signature (at build for the shapes recorded in the file, then at the first forward of each new
signature), `choose` picks one per layer:

  tuning="rule"     the layer's rule: a few documented thresholds on the shape and the device (the default);
  tuning="measure"  every candidate runs the layer a few times on scratch tensors, its kernels timed by
                    profiling events, and the lowest median wins. The winner is written to a `TuningCache`
                    file keyed by device, driver, kernel source, operator and shape, so that later graphs and
                    processes reuse it instead of measuring again.

Forward then only looks the choice up (`Variants.pick`): nothing is decided per forward.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import warnings
from pathlib import Path

import numpy as np

from kuiper.core.errors import BackendError, KuiperWarning
from kuiper.opencl.enqueuer import Enqueuer
from kuiper.opencl.runtime import DeviceTensor
from kuiper.core.variants import shape_key

RULE, MEASURE = "rule", "measure"
TUNINGS = (RULE, MEASURE)
#: timed runs per candidate, after one untimed run that builds its kernels and warms the caches
REPEATS = 5
CACHE_FORMAT = 1


def tuning_mode(tuning: str | None = None) -> str:
    """`tuning`, else the KUIPER_TUNING environment variable, else "rule"."""
    mode = tuning or os.environ.get("KUIPER_TUNING") or RULE
    if mode not in TUNINGS:
        source = "" if tuning else " (from KUIPER_TUNING)"
        raise BackendError(f"unknown tuning {mode!r}{source} (available: {', '.join(TUNINGS)})")
    return mode


def choose(layer, shapes, tuning: str = RULE, cache: TuningCache | None = None) -> str:
    """Pick the variant of `layer.variants` for these input shapes, by rule or by measurement, and remember it.

    Measuring consults `cache` (the default TuningCache when None) first, and writes new winners to it."""
    variants = layer.variants
    shapes = shape_key(shapes)
    name = variants.rule(shapes)
    names = variants.candidates(shapes) if tuning == MEASURE else [name]  # listing them may build kernels
    if len(names) > 1:
        cache = cache or TuningCache()
        key = cache_key(layer, shapes)
        name = cache.winner(key, names)
        if name is None:
            seconds = measure(layer, shapes, names)
            name = min(seconds, key=seconds.get)
            cache.store(key, name, seconds)
    return variants.fix(shapes, name)


def measure(layer, shapes, names, repeats: int = REPEATS) -> dict:
    """{variant name: median device seconds of the layer's forward with that variant} on scratch tensors.

    The candidates take turns, one run each per round, so that other work on the machine slows them alike."""
    variants, shapes = layer.variants, shape_key(shapes)
    chosen = dict(variants.chosen)
    inputs, outputs = _scratch(layer, shapes)
    runs = {name: [] for name in names}
    for round_ in range(repeats + 1):
        for name in names:
            variants.chosen[shapes] = name
            q = Enqueuer(variants.rt)
            q.begin(layer.op, ())
            layer.forward_opencl(q, inputs, outputs)
            q.finish()
            if round_:  # round 0 builds the kernels and warms the caches
                runs[name].append(q.kernel_seconds(layer.op.name))
    variants.chosen = chosen  # measuring leaves the layer's choices as they were
    return {name: statistics.median(times) for name, times in runs.items()}


def _scratch(layer, shapes) -> tuple:
    """Float32 device inputs of these shapes and outputs for them. The inputs hold values in [-1, 1): leftover
    memory could hold denormals, which slow CPU arithmetic down and would skew the timing."""
    rt = layer.variants.rt
    rng = np.random.default_rng(0)
    inputs = [DeviceTensor(rt, rt.upload(rng.uniform(-1, 1, shape).astype(np.float32)), shape, rt.storage)
              for shape in shapes]
    outputs = [DeviceTensor(rt, rt.allocate(4 * math.prod(shape)), shape, rt.storage)
               for shape in layer.output_shapes(list(shapes))]
    return inputs, outputs


def cache_key(layer, shapes) -> str:
    """What a measurement holds for: the device and its driver, the storage precision, the variants' kernel sources, the operator (its
    type and parameters; layers that differ only in their weights run alike) and the input shapes."""
    variants, op = layer.variants, layer.op
    device = variants.rt.device
    sources = hashlib.sha256("".join(variants.rt.source_hash(f) for f in variants.files).encode())
    params = " ".join(f"{key}={str(p.value).replace(' ', '')}" for key, p in sorted(op.params.items()))
    inputs = ",".join("x".join(map(str, shape)) for shape in shapes)
    return " | ".join((device.name.strip(), device.driver_version, variants.rt.precision, sources.hexdigest()[:16],
                       f"{op.type} {params}".strip(), inputs))


def default_cache_path() -> Path:
    """KUIPER_TUNING_CACHE, else $XDG_CACHE_HOME/kuiper/tuning.json, else ~/.cache/kuiper/tuning.json."""
    explicit = os.environ.get("KUIPER_TUNING_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kuiper" / "tuning.json"


class TuningCache:
    """The winners of past measurements, in a JSON file shared by every graph and process:

        {"format": 1, "entries": {"<device> | <driver> | <precision> | <sources hash> | <operator> | <input shapes>":
                                  {"variant": "channel", "seconds": {"plane": 8.1e-05, "channel": 8.8e-06}}}}

    An entry counts only where it timed exactly today's candidates. A file that cannot be read or parsed gives
    a KuiperWarning and counts as empty (the next winner rewrites it); one that cannot be written gives a
    warning too, and the winners are kept for this process only."""

    def __init__(self, path=None):
        self.path = Path(path) if path else default_cache_path()
        self._entries = None  # read on first use

    @property
    def entries(self) -> dict:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def winner(self, key: str, names) -> str | None:
        """The variant measured fastest for `key` among these candidate names, or None (measure then)."""
        entry = self.entries.get(key)
        try:
            measured, variant = set(entry["seconds"]), entry["variant"]
        except (TypeError, KeyError):
            return None  # no entry, or one written in a form this version cannot read
        return variant if measured == set(names) and variant in measured else None

    def store(self, key: str, name: str, seconds: dict) -> None:
        """Record a winner, merged with what the file holds now (another process may have added entries)."""
        seconds = {variant: float(f"{s:.4g}") for variant, s in seconds.items()}  # 4 digits: timings are noisier
        self._entries = {**self._read(warn=False), **self.entries, key: {"variant": name, "seconds": seconds}}
        text = json.dumps({"format": CACHE_FORMAT, "entries": self._entries}, indent=1, sort_keys=True)
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(text)
            os.replace(partial, self.path)  # atomic: readers see the old file or the new one, never half of one
        except OSError as e:
            _warn(f"tuning cache {self.path} cannot be written ({e}): the measurements are kept for this process only")

    def _read(self, warn: bool = True) -> dict:
        """The file's entries; none (with a warning, unless it was given already) where it cannot be used."""
        try:
            data = json.loads(self.path.read_text())
            if isinstance(data, dict) and data.get("format") == CACHE_FORMAT and isinstance(data.get("entries"), dict):
                return data["entries"]
            problem = f"not a kuiper tuning cache of format {CACHE_FORMAT}"
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            problem = e
        if warn:
            _warn(f"tuning cache {self.path} is unreadable ({problem}): ignored, and rewritten by the next measurement")
        return {}


def _warn(message: str) -> None:
    warnings.warn(message, KuiperWarning, stacklevel=2)
