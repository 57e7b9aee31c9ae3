"""Roll (torch.roll): shift the elements along dims, those pushed off one end coming back at the other:
out[..., (i + shift) % n, ...] = x[..., i, ...]. Swin transformers roll their windows by half a window.

pnnx writes `dims=(1,2) shifts=(-3,-3)`; torch.roll(x, 3) without dims is `dims=None shifts=(3)`: the tensor
rolls as if flat, then takes its shape back.

Along one dim, a roll by s (taken into 0 <= s < n) moves two blocks: the last s elements to the front and
the first n - s after them (the OpenCL forward, kuiper/opencl/roll.py, copies those blocks).
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index
from kuiper.layers.slice import refuse_tensor_inputs


@register("torch.roll")
class Roll(Layer):
    num_inputs = None  # counted by refuse_tensor_inputs, to explain the dynamic-shape form

    def __init__(self, op):
        super().__init__(op)
        refuse_tensor_inputs(self, "its shifts")
        self.shifts = self.ints_param("shifts")
        self.dims = None if self.param("dims") is None else self.ints_param("dims")
        if self.dims is None and len(self.shifts) != 1:
            raise self.error(f"shifts={self.shifts}: a roll without dims takes one shift")
        if self.dims is not None and len(self.dims) != len(self.shifts):
            raise self.error(f"shifts={self.shifts} and dims={self.dims} must have one shift per dim")

    def offsets(self, shape: tuple) -> list:
        """The shift along each dim of a `shape` input, taken into [0, size); a dim named twice adds up. Without
        dims, the shape is the flat tensor's."""
        offsets = [0] * len(shape)
        for dim, shift in zip(self.dims or (0,), self.shifts):
            offsets[dim_index(self, dim, len(shape))] += shift
        return [shift % n if n else 0 for shift, n in zip(offsets, shape)]

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        self.offsets(shape)  # checks the dims
        return [shape]

    def forward_numpy(self, inputs, outputs):
        shift = self.shifts[0] if self.dims is None else self.shifts  # np.roll flattens when axis is None
        np.copyto(outputs[0], np.roll(inputs[0], shift, axis=self.dims))
