"""torch.arange on OpenCL (the layer itself: kuiper/layers/arange.py): its numbers depend on its parameters alone,
so they are computed once on the host at build, uploaded, and copied into the output at each forward, as a
pnnx.Attribute's constant is (kuiper/opencl/attribute.py). Float numbers are stored at the runtime's precision,
integers as they are."""

from kuiper.layers import arange
from kuiper.opencl.attribute import copy_constant
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl


@opencl("torch.arange")
class Arange(OpenCLLayer, arange.Arange):
    def build_opencl(self, rt):
        self.cl_values = rt.upload(self.run_numpy()[0])

    def forward_opencl(self, q, inputs, outputs):
        copy_constant(q, self.cl_values, outputs[0])
