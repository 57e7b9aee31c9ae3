"""Permute (Tensor.permute): reorder the axes; output axis i is input axis dims[i].

The OpenCL forward: kuiper/opencl/permute.py.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("Tensor.permute")
class Permute(Layer):
    def __init__(self, op):
        super().__init__(op)
        dims = self.ints_param("dims")
        n = len(dims)
        if any(not -n <= d < n for d in dims) or sorted(d % n for d in dims) != list(range(n)):
            raise self.error(f"dims={dims} is not an order of the {n} axes")
        self.axes = tuple(d % n for d in dims)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) != len(self.axes):
            raise self.shape_error(f"dims={self.axes} needs a {len(self.axes)}-d input, got {shape}")
        return [tuple(shape[a] for a in self.axes)]

    def walked(self, walk, shape, output: int):
        """Where the output's elements sit, given the input's walk (layers/walk.py)."""
        return walk.permuted(self.axes)

    def forward_numpy(self, inputs, outputs):
        # copying the transposed view lays the elements out in the new order, as .contiguous() would
        np.copyto(outputs[0], np.transpose(inputs[0], self.axes))
