"""A fused operator on OpenCL (the operator itself: kuiper/layers/fused.py): a main layer with
`takes_opencl_epilogue` (the GEMM of a convolution or a Linear) applies the steps in the kernel that stores
its output, where they take the form of a KernelEpilogue (an add, then an activation); otherwise each step
runs as its own kernel on the output, in place."""

from __future__ import annotations

from kuiper.layers import fused
from kuiper.opencl.gemm import KernelEpilogue
from kuiper.opencl.layer import OpenCLLayer, runs_on_device


class FusedLayer(OpenCLLayer, fused.FusedLayer):
    @property
    def supports_opencl(self) -> bool:
        return runs_on_device(self.main) and all(runs_on_device(step.layer) for step in self.steps)

    def build_opencl(self, rt):
        epilogue = KernelEpilogue.of(self.steps) if getattr(self.main, "takes_opencl_epilogue", False) else None
        self.in_kernel = epilogue is not None
        if self.in_kernel:
            self.main.cl_epilogue = epilogue
        self.main.build_opencl(rt)
        for step in self.steps if not self.in_kernel else ():
            step.layer.build_opencl(rt)

    def forward_opencl(self, q, inputs, outputs):
        if self.in_kernel:  # main's kernel reads the tensors the steps add from the inputs past its own
            self.main.forward_opencl(q, inputs, outputs)
            return
        # each step's own kernel, in place on the output: element-wise, so reading and writing one buffer is safe
        self.main.forward_opencl(q, inputs[:self.main_inputs], outputs)
        for step in self.steps:
            extra = [] if step.extra is None else [inputs[step.extra]]
            step.layer.forward_opencl(q, [outputs[0], *extra], outputs)
