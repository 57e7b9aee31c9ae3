"""pnnx's aten:: fallbacks on OpenCL (the layers themselves: kuiper/layers/aten.py): the clamps with a tensor
bound and addcmul are expressions (kuiper/opencl/expression.py), and aten::zero copies one zero into every
element with the strided copy (cl/copy.cl, a source stride of 0), whatever the dtype."""

from __future__ import annotations

import numpy as np

from kuiper.layers import aten
from kuiper.opencl.expression import Expression
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import DeviceTensor
from kuiper.opencl.strided import StridedCopy, View, contiguous_strides


@opencl("aten::clamp_min")
class ClampMin(Expression, aten.ClampMin):
    pass


@opencl("aten::clamp_max")
class ClampMax(Expression, aten.ClampMax):
    pass


@opencl("aten::addcmul")
class Addcmul(Expression, aten.Addcmul):
    pass


@opencl("aten::zero")
class Zero(OpenCLLayer, aten.Zero):
    def build_opencl(self, rt):
        self.copier = StridedCopy(rt)
        self.zeros = DeviceTensor(rt, rt.upload(np.zeros(8, np.uint8)), (1,), np.uint8)  # zero in any dtype

    def forward_opencl(self, q, inputs, outputs):
        out = outputs[0]
        self.copier(q, out.shape, View(out, contiguous_strides(out.shape)), View(self.zeros, (0,) * out.ndim))
