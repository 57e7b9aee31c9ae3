"""Linear: y = x @ W^T + b over the last axis, for inputs of any rank (leading axes are batch axes).

This numpy forward is the reference; the numpy backend shares its GEMM over kuiper's threads
(kuiper/cpu/linear.py), and the OpenCL backend runs it as one GEMM kernel (kuiper/opencl/linear.py).
`Features` holds what Linear shares with Int8Linear (kuiper/layers/int8_linear.py), whose weights are int8.

A language model needs only the last position's logits to choose the next token: while its `last_row_only` is
set, a layer computes the last row of its output alone and leaves the others as they were (kuiper/llm/model.py
sets it on lm_head for a prefill that generates). A packed step of many sequences needs the last row of each:
while `gather_rows` holds row indices, the numpy forwards compute those input rows alone, into the first rows
of the output.
"""

import copy

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


class Features(Layer):
    """A product over the last axis, in_features to out_features, with an optional bias."""

    #: compute the last row of the output alone (see the module docstring)
    last_row_only = False
    #: or these input rows alone (an int array), into the output's first rows (numpy forwards)
    gather_rows = None

    def __init__(self, op):
        super().__init__(op)
        self.in_features = self.int_param("in_features")
        self.out_features = self.int_param("out_features")

    def read_bias(self):
        return self.weight("bias", (self.out_features,)) if self.bool_param("bias", True) else None

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) < 1 or shape[-1] != self.in_features:
            raise self.shape_error(f"expects input (..., {self.in_features}), got {shape}")
        return [shape[:-1] + (self.out_features,)]

    def macs(self, input_shapes, output_shapes):
        return int(np.prod(output_shapes[0], dtype=np.int64)) * self.in_features

    def rows(self, x: np.ndarray, y: np.ndarray) -> tuple:
        """(input rows, output rows) as matrices, every leading axis folded into the rows (views of contiguous
        arrays): all of them, the last alone while last_row_only is set, or those of gather_rows (a copy) and
        as many output rows from the first."""
        x, y = x.reshape(-1, self.in_features), y.reshape(-1, self.out_features)
        first, count = self.rows_written(len(y))
        rows = x[self.gather_rows] if self.gather_rows is not None else x[first:first + count]
        return rows, y[first:first + count]

    def rows_written(self, rows: int) -> tuple:
        if self.gather_rows is not None:
            return 0, len(self.gather_rows)
        return (rows - 1, 1) if self.last_row_only else (0, rows)

    def add_bias(self, out: np.ndarray) -> None:
        if self.bias is not None:
            out += self.bias


def side_by_side(linears: list) -> tuple:
    """The W^T of Linears on one input joined along their outputs, (in, sum of out), and their biases joined (None
    where they have none), for the graph passes that make them one product (runtime/gated.py, siblings.py). Each
    Linear then reads its W^T as a view of the joined matrix: the weights are held once."""
    weight_t = np.concatenate([lin.weight_t for lin in linears], axis=1)
    bias = None if linears[0].bias is None else np.concatenate([lin.bias for lin in linears])
    start = 0
    for lin in linears:
        lin.weight_t, start = weight_t[:, start:start + lin.out_features], start + lin.out_features
    return weight_t, bias


@register("nn.Linear")
class Linear(Features):
    def __init__(self, op):
        super().__init__(op)
        if self.in_features < 1 or self.out_features < 1:
            raise self.error(f"in_features={self.in_features} and out_features={self.out_features} must be >= 1")
        weight = self.weight("weight", (self.out_features, self.in_features))
        # stored as W^T (in, out), contiguous, so forward is a plain row-major (M, in) @ (in, out) GEMM
        self.weight_t = np.ascontiguousarray(weight.T)
        self.bias = self.read_bias()

    def joined(self, linears: list, op) -> "Linear":
        """One Linear for `op` doing `linears` (this one first, all on one input) side by side."""
        layer = copy.copy(self)
        layer.op = op
        layer.weight_t, layer.bias = side_by_side(linears)
        layer.out_features = layer.weight_t.shape[1]
        return layer

    def forward_numpy(self, inputs, outputs):
        x, out = self.rows(inputs[0], outputs[0])
        np.matmul(x, self.weight_t, out=out)
        self.add_bias(out)
