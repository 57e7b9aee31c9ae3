"""Adaptive average and max pooling on OpenCL (the ops and their bins: kuiper/layers/adaptive_pool.py), in
cl/pooling.cl: a work-item per output element, which computes its bin's bounds from PyTorch's formula and
pools it, consecutive work-items writing consecutive elements; AdaptiveAvgPool1d runs it on the unit-height
view. On CPUs average pooling to 1 x 1 sums each plane in a work-item of its own instead, in vectors. Max
pooling with return_indices takes the kernel that also writes where each maximum came from
(adaptive_max_pool2d_indices)."""

from __future__ import annotations

import numpy as np

from kuiper.layers import adaptive_pool
from kuiper.layers.conv1d import with_height
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up


class OpenCLAdaptivePool2d(OpenCLLayer):
    """One launch over the output elements; subclasses name their kernel."""

    #: the kernel in cl/pooling.cl
    cl_name: str

    def build_opencl(self, rt):
        self.cl_kernel = rt.kernel("pooling.cl", self.cl_name)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        q.run(self.cl_kernel, (round_up(y.size, 256),), None, *(t.buffer for t in outputs), x.buffer,
              np.int32(y.size), *map(np.int32, x.shape[-2:] + y.shape[-2:]))


@opencl("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d")
class AdaptiveAvgPool2d(OpenCLAdaptivePool2d, adaptive_pool.AdaptiveAvgPool2d):
    cl_name = "adaptive_avg_pool2d"

    def build_opencl(self, rt):
        super().build_opencl(rt)
        # CPUs pool whole planes (a 1 x 1 output: global pooling, a squeeze-excitation's) in the order they are
        # stored, in vectors (cl/pooling.cl)
        self.cl_planes = rt.kernel("pooling.cl", "global_avg_pool_rows") if rt.is_cpu else None

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if self.cl_planes is None or y.shape[-2:] != (1, 1):
            super().forward_opencl(q, inputs, outputs)
            return
        q.run(self.cl_planes, (y.size,), None, y.buffer, x.buffer, np.int32(y.size), *map(np.int32, x.shape[-2:]))


@opencl("nn.AdaptiveAvgPool1d", "F.adaptive_avg_pool1d")
class AdaptiveAvgPool1d(AdaptiveAvgPool2d, adaptive_pool.AdaptiveAvgPool1d):
    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        super().forward_opencl(q, [x.reshape(with_height(x.shape))], [y.reshape(with_height(y.shape))])


@opencl("nn.AdaptiveMaxPool2d", "F.adaptive_max_pool2d")
class AdaptiveMaxPool2d(OpenCLAdaptivePool2d, adaptive_pool.AdaptiveMaxPool2d):
    @property
    def cl_name(self):
        return "adaptive_max_pool2d_indices" if self.return_indices else "adaptive_max_pool2d"
