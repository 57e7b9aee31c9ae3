"""pnnx.Attribute: a constant tensor stored in the .bin (`@data`), e.g. a learned bias added in forward.

On OpenCL the constant is uploaded once at build, and each forward copies it into the output, device to
device. The output cannot simply be the uploaded buffer: every operand lives in a slot of the graph's memory
plan, and consumers read the tensor in that slot. Aliasing would need the planner to leave constants out of
its slots and the graph to hand consumers the constant's own DeviceTensor (safe, as no layer writes its
inputs) - a saving of one small copy per forward, not worth a special case in the planner yet.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("pnnx.Attribute")
class Attribute(Layer):
    num_inputs = 0

    def __init__(self, op):
        super().__init__(op)
        if len(op.attrs) != 1:
            raise self.error(f"expects exactly one constant '@data', found {sorted(op.attrs) or 'none'}")
        (attr,) = op.attrs.values()
        self.value = np.ascontiguousarray(attr.numpy())

    def output_shapes(self, input_shapes):
        return [self.value.shape]

    def output_dtypes(self, input_dtypes):
        return [self.value.dtype]

    def forward_numpy(self, inputs, outputs):
        outputs[0][...] = self.value

    def build_opencl(self, rt):
        self.cl_value = rt.upload(self.value)

    def forward_opencl(self, q, inputs, outputs):
        copy_constant(q, self.cl_value, outputs[0])


def copy_constant(q, constant, output) -> None:
    """Enqueue the copy of a constant uploaded at build into an output DeviceTensor of its size (any dtype:
    the bytes are copied)."""
    if output.nbytes:  # OpenCL refuses a copy of 0 bytes
        q.copy(output.buffer, constant, output.nbytes)
