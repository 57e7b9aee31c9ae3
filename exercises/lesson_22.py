"""Lesson 22: The decoder block. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 22`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or the definitions in the notes.
"""

import math

import numpy as np


def rms_norm(x, weight, eps: float):
    """RMSNorm over the last dimension of `x`: x / sqrt(mean(x²) + eps), the mean taken over that dimension
    (no mean subtracted, no bias), then times `weight` (one value per feature). Returns float32.
    See course_notes/22-decoder-block.md, exercise 1."""
    raise NotImplementedError('lesson 22: write rms_norm() in exercises/lesson_22.py; '
                              'see course_notes/22-decoder-block.md, exercise 1')


def rope_frequencies(head_dim: int, theta: float, llama3=None):
    """The angle each coordinate pair of a head turns per position, (head_dim / 2,) float64:
    inv_freq[i] = theta ** (-2i / head_dim). With `llama3` (a dict of factor, low_freq_factor, high_freq_factor
    and original_max_position_embeddings), Llama 3's scaling by wavelength 2π / inv_freq: shorter than
    original / high_freq_factor stays, longer than original / low_freq_factor is divided by factor, and between
    the two blends (1 - keep) · inv_freq / factor + keep · inv_freq with
    keep = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
    See course_notes/22-decoder-block.md, exercise 2."""
    raise NotImplementedError('lesson 22: write rope_frequencies() in exercises/lesson_22.py; '
                              'see course_notes/22-decoder-block.md, exercise 2')


def rotate(x, positions, inv_freq):
    """The rotary embedding of `x` (..., S, head_dim) at `positions` (S,), pairing coordinate i with i + head_dim/2
    as Hugging Face's checkpoints do: x · cos + rotate_half(x) · sin, where rotate_half(x) = (-x2, x1) for the
    halves x1 = x[..., :h], x2 = x[..., h:], and cos, sin of the angles positions[s] · inv_freq[i] (each used for
    both halves). Returns float32. See course_notes/22-decoder-block.md, exercise 3."""
    raise NotImplementedError('lesson 22: write rotate() in exercises/lesson_22.py; '
                              'see course_notes/22-decoder-block.md, exercise 3')


def gqa_attention(q, k, v):
    """Causal grouped-query attention over one sequence: q (B, H, S, D), k and v (B, KV, S, D) with H a multiple
    of KV. Query head h reads K/V head h // (H / KV); query position i sees keys 0..i only; the scores are
    q · k / sqrt(D), softmaxed over the keys, then the weighted sum of the values. Returns (B, H, S, D) float32.
    See course_notes/22-decoder-block.md, exercise 4."""
    raise NotImplementedError('lesson 22: write gqa_attention() in exercises/lesson_22.py; '
                              'see course_notes/22-decoder-block.md, exercise 4')


def swiglu(x, gate_weight, up_weight, down_weight):
    """The MLP of a Llama block: down(silu(gate(x)) · up(x)), each of gate, up and down a Linear without bias
    (y = x Wᵀ, W as the checkpoint stores it: (out_features, in_features)), silu(z) = z / (1 + exp(-z)), the
    product element by element. Returns float32. See course_notes/22-decoder-block.md, exercise 5."""
    raise NotImplementedError('lesson 22: write swiglu() in exercises/lesson_22.py; '
                              'see course_notes/22-decoder-block.md, exercise 5')
