"""Lesson 22: The decoder block. Reference solutions."""

import math

import numpy as np


def rms_norm(x, weight, eps: float):
    """RMSNorm over the last dimension of `x`: x / sqrt(mean(x²) + eps), the mean taken over that dimension
    (no mean subtracted, no bias), then times `weight` (one value per feature). Returns float32.
    See course_notes/22-decoder-block.md, exercise 1."""
    x = np.asarray(x, np.float32)
    mean_square = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(mean_square + np.float32(eps)) * weight).astype(np.float32)


def rope_frequencies(head_dim: int, theta: float, llama3=None):
    """The angle each coordinate pair of a head turns per position, (head_dim / 2,) float64:
    inv_freq[i] = theta ** (-2i / head_dim). With `llama3` (a dict of factor, low_freq_factor, high_freq_factor
    and original_max_position_embeddings), Llama 3's scaling by wavelength 2π / inv_freq: shorter than
    original / high_freq_factor stays, longer than original / low_freq_factor is divided by factor, and between
    the two blends (1 - keep) · inv_freq / factor + keep · inv_freq with
    keep = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
    See course_notes/22-decoder-block.md, exercise 2."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if llama3 is None:
        return inv_freq
    factor, low, high = llama3["factor"], llama3["low_freq_factor"], llama3["high_freq_factor"]
    original = llama3["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq
    keep = (original / wavelength - low) / (high - low)
    blended = (1 - keep) * inv_freq / factor + keep * inv_freq
    return np.where(wavelength < original / high, inv_freq,
                    np.where(wavelength > original / low, inv_freq / factor, blended))


def rotate(x, positions, inv_freq):
    """The rotary embedding of `x` (..., S, head_dim) at `positions` (S,), pairing coordinate i with i + head_dim/2
    as Hugging Face's checkpoints do: x · cos + rotate_half(x) · sin, where rotate_half(x) = (-x2, x1) for the
    halves x1 = x[..., :h], x2 = x[..., h:], and cos, sin of the angles positions[s] · inv_freq[i] (each used for
    both halves). Returns float32. See course_notes/22-decoder-block.md, exercise 3."""
    x = np.asarray(x, np.float32)
    angles = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]      # (S, h)
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1).astype(np.float32)       # (S, head_dim)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1).astype(np.float32)
    half = x.shape[-1] // 2
    rotated_half = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rotated_half * sin).astype(np.float32)


def gqa_attention(q, k, v):
    """Causal grouped-query attention over one sequence: q (B, H, S, D), k and v (B, KV, S, D) with H a multiple
    of KV. Query head h reads K/V head h // (H / KV); query position i sees keys 0..i only; the scores are
    q · k / sqrt(D), softmaxed over the keys, then the weighted sum of the values. Returns (B, H, S, D) float32.
    See course_notes/22-decoder-block.md, exercise 4."""
    q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)   # each K/V head serves `group` query heads
    scores = q @ k.swapaxes(-1, -2) / np.float32(math.sqrt(q.shape[-1]))
    length = q.shape[2]
    scores = np.where(np.tril(np.ones((length, length), bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (scores / scores.sum(axis=-1, keepdims=True) @ v).astype(np.float32)


def swiglu(x, gate_weight, up_weight, down_weight):
    """The MLP of a Llama block: down(silu(gate(x)) · up(x)), each of gate, up and down a Linear without bias
    (y = x Wᵀ, W as the checkpoint stores it: (out_features, in_features)), silu(z) = z / (1 + exp(-z)), the
    product element by element. Returns float32. See course_notes/22-decoder-block.md, exercise 5."""
    x = np.asarray(x, np.float32)
    gate, up = x @ gate_weight.T, x @ up_weight.T
    return ((gate / (1 + np.exp(-gate)) * up) @ down_weight.T).astype(np.float32)
