"""Linear: y = x @ W^T + b over the last axis, for inputs of any rank (leading axes are batch axes).

This numpy forward is the reference; the numpy backend shares its GEMM over kuiper's threads
(kuiper/cpu/linear.py), and the OpenCL backend runs it as one GEMM kernel (kuiper/opencl/linear.py).
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("nn.Linear")
class Linear(Layer):
    def __init__(self, op):
        super().__init__(op)
        self.in_features = self.int_param("in_features")
        self.out_features = self.int_param("out_features")
        if self.in_features < 1 or self.out_features < 1:
            raise self.error(f"in_features={self.in_features} and out_features={self.out_features} must be >= 1")
        weight = self.weight("weight", (self.out_features, self.in_features))
        # stored as W^T (in, out), contiguous, so forward is a plain row-major (M, in) @ (in, out) GEMM
        self.weight_t = np.ascontiguousarray(weight.T)
        self.bias = self.weight("bias", (self.out_features,)) if self.bool_param("bias", True) else None

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) < 1 or shape[-1] != self.in_features:
            raise self.shape_error(f"expects input (..., {self.in_features}), got {shape}")
        return [shape[:-1] + (self.out_features,)]

    def macs(self, input_shapes, output_shapes):
        return int(np.prod(output_shapes[0], dtype=np.int64)) * self.in_features

    def forward_numpy(self, inputs, outputs):
        # every leading axis folds into the GEMM's rows: (..., in) -> (M, in), a view of the contiguous arrays
        out = outputs[0].reshape(-1, self.out_features)
        np.matmul(inputs[0].reshape(-1, self.in_features), self.weight_t, out=out)
        self.add_bias(out)

    def add_bias(self, out: np.ndarray) -> None:
        if self.bias is not None:
            out += self.bias

