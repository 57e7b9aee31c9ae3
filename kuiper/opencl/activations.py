"""The element-wise activations on OpenCL: every one is one function of cl/activation.cl, chosen at build time
by -DACT=act_<name>, with at most two float parameters (a slope, two bounds). The fusion pass runs the same
function inside a GEMM's store (kuiper/opencl/gemm.py, KernelEpilogue) when the activation follows one."""

from __future__ import annotations

import numpy as np

from kuiper.layers import clamp, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu, relu, sigmoid, silu, tanh
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up


class OpenCLElementwise(OpenCLLayer):
    """One kernel launch over all elements; subclasses name their formula (`cl_function`)."""

    #: the function's name in cl/activation.cl
    cl_function: str = ""

    def cl_params(self) -> tuple:
        """The (a, b) floats the OpenCL formula reads (slopes, bounds)."""
        return 0.0, 0.0

    def build_opencl(self, rt):
        # CPUs: exactly one work-item per element, no bounds check (Enqueuer.run_exact)
        self.cl_exact = rt.is_cpu
        self.cl_kernel = rt.kernel("activation.cl", "activation",
                                   [f"-DACT=act_{self.cl_function}", *(["-DEXACT"] if self.cl_exact else [])])

    def forward_opencl(self, q, inputs, outputs):
        n = outputs[0].size
        a, b = self.cl_params()
        args = (outputs[0].buffer, inputs[0].buffer, np.int32(n), np.float32(a), np.float32(b))
        if self.cl_exact:
            q.run_exact(self.cl_kernel, (n,), 256, *args)
        elif n:
            q.run(self.cl_kernel, (round_up(n, 256),), None, *args)


@opencl("nn.ReLU", "F.relu")
class ReLU(OpenCLElementwise, relu.ReLU):
    cl_function = "relu"


@opencl("nn.Sigmoid", "F.sigmoid")
class Sigmoid(OpenCLElementwise, sigmoid.Sigmoid):
    cl_function = "sigmoid"


@opencl("nn.Tanh", "F.tanh")
class Tanh(OpenCLElementwise, tanh.Tanh):
    cl_function = "tanh"


@opencl("nn.SiLU", "F.silu")
class SiLU(OpenCLElementwise, silu.SiLU):
    cl_function = "silu"


@opencl("nn.Hardsigmoid", "F.hardsigmoid")
class Hardsigmoid(OpenCLElementwise, hardsigmoid.Hardsigmoid):
    cl_function = "hardsigmoid"


@opencl("nn.Hardswish", "F.hardswish")
class Hardswish(OpenCLElementwise, hardswish.Hardswish):
    cl_function = "hardswish"


@opencl("nn.LeakyReLU", "F.leaky_relu")
class LeakyReLU(OpenCLElementwise, leaky_relu.LeakyReLU):
    cl_function = "leaky_relu"

    def cl_params(self):
        return self.negative_slope, 0.0


class _Clip(OpenCLElementwise):
    """Hardtanh, ReLU6 and clamp: one formula between two bounds (an open side is an infinite bound)."""

    cl_function = "clamp"

    def cl_params(self):
        return self.min_val, self.max_val


@opencl("nn.Hardtanh", "F.hardtanh")
class Hardtanh(_Clip, hardtanh.Hardtanh):
    pass


@opencl("nn.ReLU6", "F.relu6")
class ReLU6(_Clip, hardtanh.ReLU6):
    pass


@opencl("torch.clamp")
class Clamp(OpenCLElementwise, clamp.Clamp):
    cl_function = "clamp"

    def cl_params(self):
        return (-np.inf if self.min is None else self.min), (np.inf if self.max is None else self.max)


@opencl("nn.GELU", "F.gelu")
class GELU(OpenCLElementwise, gelu.GELU):
    @property
    def cl_function(self):
        return "gelu_tanh" if self.approximate == "tanh" else "gelu"
