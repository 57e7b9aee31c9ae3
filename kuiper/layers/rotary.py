"""Rotary position embedding (RoPE): tell attention where each token is by rotating its query and key.

Attention compares a query with keys by dot products, which know nothing of order. RoPE rotates pairs of
coordinates of each head's query and key by an angle proportional to the token's position p:

    angle[p, i] = p * inv_freq[i],   inv_freq[i] = rope_theta ** (-2i / head_dim),   i = 0 .. head_dim/2 - 1

Rotating q at position p and k at position s by their angles makes q.k depend on p - s only: relative
position, for free, at every layer. The first pairs turn fast (inv_freq near 1), the last ones slowly, so
near and far positions both stay distinguishable.

Which coordinates make a pair is a convention, and the checkpoint's weights follow one. Meta's original code
(and llama2.c) pairs neighbours (0,1), (2,3), ...; Hugging Face's checkpoints pair the two halves of the head,
(i, i + head_dim/2), written as x * cos + rotate_half(x) * sin with rotate_half(x) = (-x2, x1); its conversion
script permutes the q and k projection rows so that both give the same model. This layer uses the halves:

    out[:, :, s, :h] = x1 * cos - x2 * sin        x1 = x[..., :h], x2 = x[..., h:], h = head_dim / 2
    out[:, :, s, h:] = x2 * cos + x1 * sin        cos, sin of angle[positions[s]]

Scaling, to run past the context a model was trained on (`rope_type`):
* "default": none.
* "linear": every inv_freq divided by `factor` (positions squeezed factor times closer).
* "llama3" (Llama 3.1 and later): by wavelength 2 pi / inv_freq. Wavelengths shorter than
  original_max_position_embeddings / high_freq_factor keep their frequency, those longer than
  original_max_position_embeddings / low_freq_factor are divided by `factor`, and in between the two blend
  smoothly, by how many wavelengths fit in the original context.

Inputs: x (B, H, S, head_dim) float32 and positions (S,) int64, the position of each of the S tokens (the same
for every batch element and head). The angles are worked out in float64, so that a long context keeps its
precision, and then rounded once to float32.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

ROPE_TYPES = ("default", "linear", "llama3")


def inverse_frequencies(head_dim: int, theta: float, rope_type: str = "default", factor: float = 1.0,
                        low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
                        original_max_position_embeddings: int = 8192) -> np.ndarray:
    """inv_freq (head_dim / 2,) float64: the angle each coordinate pair turns per position, after scaling."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if rope_type == "linear":
        return inv_freq / factor
    if rope_type == "llama3":
        wavelength = 2 * math.pi / inv_freq
        short = original_max_position_embeddings / high_freq_factor  # wavelengths below: unchanged
        long = original_max_position_embeddings / low_freq_factor    # wavelengths above: divided by factor
        # 0 at the long end, 1 at the short end: how much of the original frequency to keep
        keep = (original_max_position_embeddings / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
        blended = (1 - keep) * inv_freq / factor + keep * inv_freq
        return np.where(wavelength < short, inv_freq, np.where(wavelength > long, inv_freq / factor, blended))
    return inv_freq


@register("kuiper.RotaryEmbedding")
class RotaryEmbedding(Layer):
    num_inputs = 2

    def __init__(self, op):
        super().__init__(op)
        self.head_dim = self.int_param("head_dim")
        if self.head_dim < 2 or self.head_dim % 2:
            raise self.error(f"head_dim={self.head_dim} must be even and >= 2 (coordinates rotate in pairs)")
        theta = self.float_param("rope_theta", 10000.0)
        if theta <= 1:
            raise self.error(f"rope_theta={theta} must be > 1")
        self.rope_type = self.str_param("rope_type", "default", choices=ROPE_TYPES)
        scaling = {}
        if self.rope_type in ("linear", "llama3"):
            scaling["factor"] = self.float_param("factor")
            if scaling["factor"] <= 0:
                raise self.error(f"factor={scaling['factor']} must be > 0")
        if self.rope_type == "llama3":
            low, high = self.float_param("low_freq_factor"), self.float_param("high_freq_factor")
            original = self.int_param("original_max_position_embeddings")
            if not 0 < low < high or original < 1:
                raise self.error(f"low_freq_factor={low} and high_freq_factor={high} must satisfy 0 < low < high, "
                                 f"and original_max_position_embeddings={original} be >= 1")
            scaling.update(low_freq_factor=low, high_freq_factor=high, original_max_position_embeddings=original)
        self.inv_freq = inverse_frequencies(self.head_dim, theta, self.rope_type, **scaling)

    def output_shapes(self, input_shapes):
        x, positions = tuple(input_shapes[0]), tuple(input_shapes[1])
        if len(x) != 4 or x[3] != self.head_dim:
            raise self.shape_error(f"expects x (B, H, S, {self.head_dim}), got {x}")
        if positions != (x[2],):
            raise self.shape_error(f"expects positions ({x[2]},), one per token of x {x}, got {positions}")
        return [x]

    def output_dtypes(self, input_dtypes):
        if np.dtype(input_dtypes[1]).kind not in "iu":
            raise self.shape_error(f"expects integer positions, got {np.dtype(input_dtypes[1])}")
        return [np.dtype(np.float32)]

    def cos_sin(self, positions: np.ndarray) -> tuple:
        """cos and sin of every token's angles, (S, head_dim / 2) float32 each."""
        angles = positions.astype(np.float64)[:, None] * self.inv_freq[None, :]
        return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)

    def forward_numpy(self, inputs, outputs):
        x, positions = inputs
        out = outputs[0]
        cos, sin = self.cos_sin(positions)
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:] = x2 * cos + x1 * sin
