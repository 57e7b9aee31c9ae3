"""Resizing on OpenCL (the op, its modes and PyTorch's sampling rules: kuiper/layers/upsample.py), in
cl/resize.cl. A work-item computes one output pixel, its taps computed in the kernel with the same float32
arithmetic as the reference's plans, from the scales the host computes (source_scale): no plan is uploaded, and
one program per mode (-DTAPS: 1 nearest, 2 bilinear, 4 bicubic) serves every shape.

On GPUs the work-items cover a flat range of the output; on CPUs (-DGRID) a (width, height, planes) grid
launched in spans of SPAN columns, so that PoCL can run a span's work-items as one vector."""

from __future__ import annotations

import numpy as np

from kuiper.layers import upsample
from kuiper.layers.upsample import source_scale
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up

#: on CPUs the OpenCL grid's columns are launched in spans of this many, the last ones apart (cl/resize.cl)
SPAN = 16


@opencl("nn.Upsample", "F.upsample", "F.interpolate", "F.upsample_nearest", "F.upsample_bilinear")
class Upsample(OpenCLLayer, upsample.Upsample):
    def build_opencl(self, rt):
        nearest = self.mode.startswith("nearest")
        taps = 1 if nearest else 2 if self.mode == "bilinear" else 4
        self.cl_grid = rt.is_cpu
        grid = ["-DGRID"] if self.cl_grid else []
        self.cl_kernel = rt.kernel("resize.cl", "resize", [f"-DTAPS={taps}", *grid])
        # the kernel's last argument: nearest's `exact` (nearest-exact), the interpolating ones' align_corners
        self.cl_flag = np.int32(self.mode == "nearest-exact" if nearest else self.align_corners)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if not y.size:  # OpenCL refuses an empty range
            return
        sizes = x.shape[2:] + y.shape[2:]
        scales = (source_scale(in_size, out_size, self.align_corners, scale)
                  for in_size, out_size, scale in zip(x.shape[2:], y.shape[2:], self.kernel_scales))
        args = (y.buffer, x.buffer, np.int32(y.size), *map(np.int32, sizes), *scales, self.cl_flag)
        if self.cl_grid:
            q.run_exact(self.cl_kernel, (y.shape[3], y.shape[2], y.shape[0] * y.shape[1]), SPAN, *args)
        else:
            q.run(self.cl_kernel, (round_up(y.size, 256),), None, *args)
