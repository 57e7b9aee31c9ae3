"""The rotary position embedding on OpenCL (the layer itself: kuiper/layers/rotary.py): cl/rotary.cl turns the
halves of every head, one work-item per coordinate pair and token, cos and sin computed on the device from the
positions tensor, which stays there.

The reference works the angles out in float64; devices need not have doubles (cl_khr_fp64 is optional), so the
host gives the kernel each frequency in turns per position as two floats, hi + lo, and the kernel keeps only the
fraction of a turn of p * (hi + lo), exactly enough for float32's cos and sin at any position below 2^24
(cl/rotary.cl says how). Those pairs are uploaded once, at build, as bits: at fp16 storage rt.upload would
round float32 arrays to half.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers import rotary
from kuiper.opencl.indices import IndexKernels
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl


def turn_pairs(inv_freq: np.ndarray) -> np.ndarray:
    """(hi, lo) float32 pairs, one per frequency, whose sum is inv_freq / 2 pi to about 48 bits: the turns a
    coordinate pair makes per position."""
    turns = inv_freq / (2 * math.pi)
    hi = turns.astype(np.float32)
    lo = (turns - hi.astype(np.float64)).astype(np.float32)
    return np.stack([hi, lo], axis=1).reshape(-1)


@opencl("kuiper.RotaryEmbedding")
class RotaryEmbedding(OpenCLLayer, rotary.RotaryEmbedding):
    def build_opencl(self, rt):
        self.cl_rotary = IndexKernels(rt, "rotary.cl", "rotary")
        self.cl_turns = rt.upload(turn_pairs(self.inv_freq).view(np.uint32))

    def forward_opencl(self, q, inputs, outputs):
        x, positions = inputs
        out = outputs[0]
        if not out.size:  # OpenCL refuses an empty range
            return
        batch, heads, tokens, dim = x.shape
        half = dim // 2
        q.run(self.cl_rotary[positions.dtype], (half, tokens), None, out.buffer, x.buffer, positions.buffer,
              self.cl_turns, batch * heads, tokens, half)
