"""BatchNorm2d on OpenCL (the layer itself: kuiper/layers/batchnorm2d.py): the folded y = x * scale + shift per
element, in cl/batchnorm.cl.

The N * C planes of H * W pixels can be split over work-items in three ways, the layer's variants
(kuiper/opencl/tuning.py): "plane" (a work-item per pixel, batchnorm_pixel), "channel" (a work-item per plane)
and "tiled" (a work-item per TILE pixels of a plane), the last two the same kernel, batchnorm_run, over runs
of different lengths. `rule` says which one suits a shape on a device: neighbouring pixels in neighbouring
work-items on GPUs, whose loads merge; a loop over contiguous pixels within a work-item on CPUs.

BatchNorm1d runs "tiled" on its (N, C, L, 1) view: its planes are one row of L values. A residual sum and an
activation fused after the layer (kuiper/opencl/fused.py) run in its kernels' stores (`cl_epilogue`), as a
convolution's do: DenseNet's BatchNorm then ReLU is one pass over the tensor.
"""

from __future__ import annotations

from kuiper.layers import batchnorm2d
from kuiper.opencl.gemm import NO_EPILOGUE
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up
from kuiper.core.variants import Variant, Variants

#: "tiled" gives each work-item this many pixels: 4 KiB of input, a loop long enough to run at full SIMD
#: speed, while a 224x224 plane still splits into 49 work-items, enough for every core of a CPU
TILE = 1024
#: "plane" rounds each plane up to a row of this many work-items (see forward); planes smaller than that leave
#: part of the row idle, which on a GPU still costs no more than "channel" does
ROW = 16


def rule(shape: tuple, is_cpu: bool) -> str:
    """The variant for an (N, C, H, W) input on a CPU or another device (benchmarks/batchnorm.py measures them;
    docs/tuning.md has the figures):

    * on CPUs, many small planes (C > H * W) go to "channel": the planes alone give enough work-items, each a
      short loop; everything else goes to "tiled": PoCL runs a work-item's own loop over contiguous pixels at
      SIMD speed, and one pixel per work-item ("plane") 4-15x slower (its bounds check keeps PoCL from
      vectorizing across work-items);
    * on GPUs everything goes to "plane": neighbouring work-items read neighbouring pixels, which the GPU
      merges into wide loads, small planes included (a work-item per plane or tile reads memory with a stride,
      which is several times slower on large planes).
    """
    _, c, h, w = shape
    if not is_cpu:
        return "plane"
    return "channel" if c > h * w else "tiled"


@opencl("nn.BatchNorm2d")
class BatchNorm2d(OpenCLLayer, batchnorm2d.BatchNorm2d):
    #: the fused steps the kernels apply as they store the output (a KernelEpilogue, set by FusedLayer)
    cl_epilogue = NO_EPILOGUE

    #: a fused activation or residual sum runs in the kernels' store (kuiper/runtime/fusion.py)
    takes_opencl_epilogue = True

    def build_opencl(self, rt):
        self.cl_scale, self.cl_shift = rt.upload(self.scale.ravel()), rt.upload(self.shift.ravel())

        def pixel_kernel():
            return rt.kernel("batchnorm.cl", "batchnorm_pixel", self.cl_epilogue.options)

        def run_kernel():
            return rt.kernel("batchnorm.cl", "batchnorm_run", self.cl_epilogue.options)

        variants = [Variant("plane", pixel_kernel, self._per_pixel), Variant("channel", run_kernel, self._per_plane),
                    Variant("tiled", run_kernel, self._per_tile)]
        self.variants = Variants(rt, ["batchnorm.cl"], variants, lambda shapes: rule(shapes[0], rt.is_cpu))

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if y.size:  # OpenCL refuses an empty range; keyed as the plan fixed it, a fused sum's tensor included
            self.variants.pick(tuple(t.shape for t in inputs))(q, y, x, self.cl_epilogue.args(inputs, y))

    def _per_pixel(self, q, kernel, y, x, epilogue: tuple):
        n, c, h, w = x.shape
        q.run(kernel, (round_up(h * w, ROW), n * c), None, y.buffer, x.buffer, self.cl_scale, self.cl_shift, h * w, c,
              *epilogue)

    def _per_plane(self, q, kernel, y, x, epilogue: tuple):
        self._per_run(q, kernel, y, x, epilogue, run=x.shape[2] * x.shape[3])

    def _per_tile(self, q, kernel, y, x, epilogue: tuple):
        self._per_run(q, kernel, y, x, epilogue, run=TILE)

    def _per_run(self, q, kernel, y, x, epilogue: tuple, run: int):
        n, c, h, w = x.shape
        q.run(kernel, (-(-h * w // run), n * c), None, y.buffer, x.buffer, self.cl_scale, self.cl_shift, h * w, c,
              run, *epilogue)


@opencl("nn.BatchNorm1d")
class BatchNorm1d(BatchNorm2d, batchnorm2d.BatchNorm1d):
    def build_opencl(self, rt):
        super().build_opencl(rt)
        self.variants = None  # one way: "tiled", on the planes' view (the graph's shapes are not 4-d)
        self.cl_run = rt.kernel("batchnorm.cl", "batchnorm_run", self.cl_epilogue.options)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if y.size:
            planes = batchnorm2d.as_planes(x.shape)
            self._per_tile(q, self.cl_run, y.reshape(planes), x.reshape(planes), self.cl_epilogue.args(inputs, y))
