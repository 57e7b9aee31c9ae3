"""Transpose (torch.transpose): swap two axes, dim0 and dim1.

The OpenCL forward: kuiper/opencl/transpose.py.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index


@register("torch.transpose")
class Transpose(Layer):
    def __init__(self, op):
        super().__init__(op)
        self.dim0 = self.int_param("dim0")
        self.dim1 = self.int_param("dim1")

    def output_shapes(self, input_shapes):
        shape = list(input_shapes[0])
        a = dim_index(self, self.dim0, len(shape))
        b = dim_index(self, self.dim1, len(shape))
        shape[a], shape[b] = shape[b], shape[a]
        return [tuple(shape)]

    def axes(self, rank: int) -> list:
        """The permute this transpose is: the order of the axes with the two swapped."""
        axes = list(range(rank))
        a, b = self.dim0 % rank, self.dim1 % rank
        axes[a], axes[b] = axes[b], axes[a]
        return axes

    def walked(self, walk, shape, output: int):
        """Where the output's elements sit, given the input's walk (layers/walk.py)."""
        return walk.permuted(self.axes(len(shape)))

    def forward_numpy(self, inputs, outputs):
        # numpy reads negative axes the way PyTorch does, so the dims go in unchanged
        np.copyto(outputs[0], np.swapaxes(inputs[0], self.dim0, self.dim1))
