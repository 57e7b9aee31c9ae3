"""pnnx.Attribute on OpenCL (the layer itself: kuiper/layers/attribute.py): the constant is uploaded once at
build, and each forward copies it into the output, device to device. The output cannot simply be the uploaded
buffer: every operand lives in a slot of the graph's memory plan, and consumers read the tensor in that slot.
Aliasing would need the planner to leave constants out of its slots and the graph to hand consumers the
constant's own DeviceTensor (safe, as no layer writes its inputs) - a saving of one small copy per forward,
not worth a special case in the planner yet.
"""

from kuiper.layers import attribute
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl


@opencl("pnnx.Attribute")
class Attribute(OpenCLLayer, attribute.Attribute):
    def build_opencl(self, rt):
        self.cl_value = rt.upload(self.value)

    def forward_opencl(self, q, inputs, outputs):
        copy_constant(q, self.cl_value, outputs[0])


def copy_constant(q, constant, output) -> None:
    """Enqueue the copy of a constant uploaded at build into an output DeviceTensor of its size (any dtype:
    the bytes are copied)."""
    if output.nbytes:  # OpenCL refuses a copy of 0 bytes
        q.copy(output.buffer, constant, output.nbytes)
