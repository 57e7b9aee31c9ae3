"""Lesson 26: Weight quantization. Reference solutions."""

import numpy as np


def _bounds(inputs: int, group: int) -> list:
    return [(k, min(k + group, inputs)) for k in range(0, inputs, group)]


def quantize_groups(w, group: int = 32):
    """Symmetric int8 quantization of a float matrix `w` (out, in) per group of `group` consecutive inputs of
    each row (the last group shorter where `group` does not divide `in`): returns (q, scales), q int8 (out, in)
    with q = round(w / scale) (numpy's rint, halves to even), scales float32 (out, groups) with
    scale = max |w| / 127 over the group; an all-zero group has scale 0 and q 0.
    See course_notes/26-quantization.md, exercise 1."""
    w = np.asarray(w, dtype=np.float32)
    bounds = _bounds(w.shape[1], group)
    q = np.zeros(w.shape, dtype=np.int8)
    scales = np.zeros((w.shape[0], len(bounds)), dtype=np.float32)
    for g, (begin, end) in enumerate(bounds):
        block = w[:, begin:end]
        scale = np.abs(block).max(axis=1) / np.float32(127)
        scales[:, g] = scale
        safe = np.where(scale > 0, scale, 1)[:, None]
        q[:, begin:end] = np.clip(np.rint(block / safe), -127, 127)
    return q, scales


def dequantize_groups(q, scales, group: int = 32):
    """The float32 weights (out, in) that int8 `q` and its `scales` (out, groups) stand for: q * scale, each
    weight by its group's scale. See course_notes/26-quantization.md, exercise 2."""
    w = q.astype(np.float32)
    for g, (begin, end) in enumerate(_bounds(q.shape[1], group)):
        w[:, begin:end] *= scales[:, g:g + 1]
    return w


def int8_matvec(q, scales, x, group: int = 32):
    """y = W x (out,) float32 for W = dequantize_groups(q, scales, group) and a vector x (in,), computed group by
    group: y_n = sum over groups g of scales[n, g] * (q[n, g's inputs] . x[g's inputs]), without building the
    float matrix W. See course_notes/26-quantization.md, exercise 3."""
    x = np.asarray(x, dtype=np.float32)
    y = np.zeros(q.shape[0], dtype=np.float32)
    for g, (begin, end) in enumerate(_bounds(q.shape[1], group)):
        y += scales[:, g] * (q[:, begin:end].astype(np.float32) @ x[begin:end])
    return y


def quantized_bytes(shapes, group: int = 32) -> int:
    """The bytes that Linear weights of these (out, in) shapes take quantized: one byte per weight, and a
    float32 scale (4 bytes) per group of `group` inputs of each row, a shorter last group included.
    See course_notes/26-quantization.md, exercise 4."""
    return sum(out * inputs + 4 * out * -(-inputs // group) for out, inputs in shapes)
