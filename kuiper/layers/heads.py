"""Heads cut out of one projection, some of them rotated: a split along the last dim whose every piece is cut
into heads (reshape, then permute) and maybe turned by a RotaryEmbedding, as one operator.

After the sibling-projections pass (kuiper/runtime/siblings.py) an attention block computes q, k and v in one
product, (B, S, n_q * D + n_k * D + n_v * D), then cuts it back: a split into the three, each piece reshaped to
(B, S, n, D) and permuted to (B, n, S, D), and q and k rotated (rotary.py). As the graph is written that is
three copies and two rotations, five passes over the same numbers and five launches of a GPU's decode step,
whose time is its launches (docs/performance.md). The heads pass (kuiper/runtime/heads.py) makes them this one
layer: every output head read from its columns of the product and written once, turned where a rotary
followed.

Qwen3 normalizes each head of q and k (an RMSNorm over its D coordinates) between the reshape and the permute;
those norms come in too, each applied before its piece's rotation.

Inputs: x (B, S, sum of n * D) float32 and, where a piece is rotated, positions (S,) int. Outputs: one
(B, n, S, D) per piece, in the split's order. `rotaries` holds each piece's RotaryEmbedding layer, or None, and
`norms` its RMSNorm layer, or None.
"""

from __future__ import annotations

import numpy as np

from kuiper.layers.base import Layer


class SplitHeads(Layer):
    num_inputs = None

    def __init__(self, op, heads: list, head_dim: int, rotaries: list, norms: list | None = None):
        super().__init__(op)
        self.heads, self.head_dim, self.rotaries = list(heads), head_dim, list(rotaries)
        self.norms = list(norms) if norms is not None else [None] * len(self.heads)
        self.rotated = any(r is not None for r in self.rotaries)
        self.firsts = np.cumsum([0] + [n * head_dim for n in self.heads[:-1]]).tolist()  # each piece's first column
        wanted = 2 if self.rotated else 1
        if len(op.input_operands) != wanted:
            raise self.error(f"expects {wanted} input(s), the graph gives {len(op.input_operands)}")

    @property
    def width(self) -> int:
        """The columns of x: every piece's heads side by side."""
        return sum(self.heads) * self.head_dim

    def output_shapes(self, input_shapes):
        x = tuple(input_shapes[0])
        if len(x) != 3 or x[2] != self.width:
            raise self.shape_error(f"expects x (B, S, {self.width}), got {x}")
        if self.rotated and tuple(input_shapes[1]) != (x[1],):
            raise self.shape_error(f"expects positions ({x[1]},), one per token of x {x}, "
                                   f"got {tuple(input_shapes[1])}")
        return [(x[0], n, x[1], self.head_dim) for n in self.heads]

    def output_dtypes(self, input_dtypes):
        if self.rotated and np.dtype(input_dtypes[1]).kind not in "iu":
            raise self.shape_error(f"expects integer positions, got {np.dtype(input_dtypes[1])}")
        return [np.dtype(np.float32)] * len(self.heads)

    def pieces(self, x: np.ndarray) -> list:
        """Each piece of x as its (B, n, S, D) heads: views, nothing copied."""
        batch, tokens, _ = x.shape
        return [x[..., first:first + n * self.head_dim].reshape(batch, tokens, n, self.head_dim).transpose(0, 2, 1, 3)
                for first, n in zip(self.firsts, self.heads)]

    def forward_numpy(self, inputs, outputs):
        for heads, norm, rotary, out in zip(self.pieces(inputs[0]), self.norms, self.rotaries, outputs):
            if norm is not None:
                normed = np.empty(heads.shape, np.float32)
                norm.forward_numpy([heads], [normed])
                heads = normed
            if rotary is None:
                np.copyto(out, heads)
            else:
                rotary.forward_numpy([heads, inputs[1]], [out])
