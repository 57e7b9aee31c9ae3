"""Concatenate (torch.cat): join the inputs along dim; every other size must agree.

The OpenCL forward: kuiper/opencl/cat.py.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index


@register("torch.cat")
class Cat(Layer):
    num_inputs = None

    def __init__(self, op):
        super().__init__(op)
        self.dim = self.int_param("dim", 0)

    def output_shapes(self, input_shapes):
        shapes = [tuple(s) for s in input_shapes]
        first = shapes[0]
        axis = dim_index(self, self.dim, len(first))
        others = first[:axis] + first[axis + 1:]  # the sizes every input must share
        for shape in shapes[1:]:
            if len(shape) != len(first) or shape[:axis] + shape[axis + 1:] != others:
                raise self.shape_error(f"cannot join {shapes} along dim {self.dim}")
        return [first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]]

    def forward_numpy(self, inputs, outputs):
        np.concatenate(inputs, axis=self.dim, out=outputs[0])
