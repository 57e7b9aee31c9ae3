"""Stack (torch.stack): join inputs of one shape along a new dim, so that output[:, ..., i] is input i.

It is a cat of the inputs, each given a size-1 dim at `dim` (on OpenCL too: kuiper/opencl/stack.py).
`dim` counts in the output, one dim longer than the inputs: -1 puts the new dim last.
"""

import numpy as np

from kuiper.layers.cat import Cat
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index


@register("torch.stack")
class Stack(Cat):
    def output_shapes(self, input_shapes):
        shapes = [tuple(s) for s in input_shapes]
        if any(s != shapes[0] for s in shapes[1:]):
            raise self.shape_error(f"stacks inputs of one shape, got {shapes}")
        axis = dim_index(self, self.dim, len(shapes[0]) + 1)
        return [shapes[0][:axis] + (len(shapes),) + shapes[0][axis:]]

    def forward_numpy(self, inputs, outputs):
        np.stack(inputs, axis=self.dim, out=outputs[0])
