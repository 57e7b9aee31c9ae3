"""Int8 weights for a language model: every Linear of the decoder (q/k/v/o, gate/up/down and lm_head) quantized as
the model loads, with kuiper/layers/int8_linear.py's definition (int8 values, one float scale per GROUP inputs,
as llama.cpp's Q8_0). The embedding and the norms stay float.

The decoder graph (decoder.py) declares each Linear as a kuiper.Int8Linear operator whose `@qweight` (out, in) i8
and `@scales` (out, groups) f32 are not in the checkpoint: `QuantizedWeights` stands in front of the checkpoint's
store and makes both from the float tensor `<module>.weight` when the graph asks for the first of them, keeping
the other until it is asked for. Everything else is the checkpoint's own tensor.
"""

from __future__ import annotations

import numpy as np

from kuiper.core.errors import CheckpointError, ConfigError
from kuiper.layers.int8_linear import GROUP, groups, quantize

#: what `quantize=` takes: None keeps the checkpoint's float weights
SCHEMES = ("int8",)
#: weight rows quantized at a time, so that the float temporaries of a large lm_head stay small
CHUNK_ROWS = 4096
_KEYS = ("qweight", "scales")


def check_scheme(quantize) -> str | None:
    if quantize is not None and quantize not in SCHEMES:
        raise ConfigError(f"quantize={quantize!r}: give None (the checkpoint's float weights) or "
                          f"{', '.join(map(repr, SCHEMES))}")
    return quantize


def float_weight(weights, name: str) -> np.ndarray:
    """A checkpoint tensor widened to float32 (bf16's words shifted into a float's high half)."""
    entry = weights.entry(name)
    raw = weights.view(name, entry.dtype, entry.shape)
    if entry.dtype == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32, copy=False)


def quantize_rows(weight: np.ndarray, group: int = GROUP) -> tuple:
    """quantize(), CHUNK_ROWS rows at a time."""
    out, inp = weight.shape
    q = np.empty((out, inp), dtype=np.int8)
    scales = np.empty((out, groups(inp, group)), dtype=np.float32)
    for top in range(0, out, CHUNK_ROWS):
        q[top:top + CHUNK_ROWS], scales[top:top + CHUNK_ROWS] = quantize(weight[top:top + CHUNK_ROWS], group)
    return q, scales


class QuantizedWeights:
    """A checkpoint store (weights.py's CheckpointWeights) that also serves `<module>.qweight` and
    `<module>.scales`, quantized from `<module>.weight`: BinFile's `path` and `view`, as the graph binds them."""

    def __init__(self, weights):
        self.weights = weights
        self.path = weights.path
        self._waiting = {}  # (module, key) -> the half of a quantized pair not yet asked for

    def view(self, name: str, dtype: str, shape: tuple, declared_at: str = "") -> np.ndarray:
        module, _, key = name.rpartition(".")
        if key not in _KEYS:
            return self.weights.view(name, dtype, shape, declared_at)
        array = self._waiting.pop((module, key), None)
        if array is None:
            pair = dict(zip(_KEYS, quantize_rows(float_weight(self.weights, f"{module}.weight"))))
            array = pair.pop(key)
            (other, half), = pair.items()
            self._waiting[(module, other)] = half
        if (str(array.dtype), array.shape) != (np.dtype(_dtype(dtype)).name, tuple(shape)):
            raise CheckpointError(f"{self.path}: {name} quantized is {list(array.shape)} {array.dtype}, the graph "
                                  f"declares {list(shape)} {dtype}")
        return array


def _dtype(pnnx_dtype: str):
    return {"i8": np.int8, "f32": np.float32}.get(pnnx_dtype, np.void)
