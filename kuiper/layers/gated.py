"""A gated linear unit, the first half of Llama's MLP: silu(x @ Wg^T + bg) * (x @ Wu^T + bu).

The decoder's graph writes it as PyTorch computes it (kuiper/llm/decoder.py): the gate's and the up projection's
Linears on the same input, F.silu on the gate, a pnnx.Expression mul(@0,@1). The gated-MLP pass
(kuiper/runtime/gated.py) makes those four operators one, whose layer is a GatedLinear: the two weight matrices
side by side, W^T = [Wg^T | Wu^T] (in_features x 2 * out_features), so that one product reads x once for both,
then the first half of each row of the product, through the SiLU, times its second half.

The backends gain from the one product of twice the width: the numpy backend makes one BLAS call where it made
two, and OpenCL one GEMM where it launched four (each Linear's panels and the columns past them), with the SiLU
and the product in the GEMM's store on CPUs (kuiper/opencl/gated.py).
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.linear import Features, side_by_side


class GatedLinear(Layer):
    """`gate` and `up` (two Linear layers of the same shape, with biases or without) and `act`, the gate's SiLU
    layer: their weights are joined here, and the two Linears then read theirs from the joined matrix."""

    num_inputs = 1

    def __init__(self, op, gate, up, act):
        super().__init__(op)
        self.act = act
        self.in_features, self.out_features = gate.in_features, gate.out_features
        self.weight_t, self.bias = side_by_side([gate, up])

    output_shapes = Features.output_shapes  # (..., in_features) -> (..., out_features), as a Linear's

    def macs(self, input_shapes, output_shapes):
        return 2 * int(np.prod(output_shapes[0], dtype=np.int64)) * self.in_features

    def workspace_bytes(self, input_shapes):
        return 4 * 2 * self.out_features * math.prod(input_shapes[0][:-1])  # the product, twice the output

    def forward_numpy(self, inputs, outputs):
        x = inputs[0].reshape(-1, self.in_features)
        both = self.product_buffer(len(x))
        self.product(x, both)
        self.gate_times_up(both, outputs[0].reshape(-1, self.out_features))

    def product_buffer(self, rows: int) -> np.ndarray:
        """Where the product of `rows` rows goes: a new array at each forward here."""
        return np.empty((rows, 2 * self.out_features), np.float32)

    def product(self, x: np.ndarray, both: np.ndarray) -> None:
        """Both projections of the rows of x, side by side, biases added."""
        np.matmul(x, self.weight_t, out=both)
        if self.bias is not None:
            both += self.bias

    def gate_times_up(self, both: np.ndarray, out: np.ndarray) -> None:
        """out = silu(gate) * up, from the rows of `both`."""
        self.act.apply(both[:, :self.out_features], out)
        out *= both[:, self.out_features:]
