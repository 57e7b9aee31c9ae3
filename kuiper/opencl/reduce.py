"""torch.sum, torch.mean, torch.amax, torch.amin, torch.norm and F.normalize on OpenCL (the layers themselves: kuiper/layers/reduce.py).

In cl/reduce.cl one work-item computes one output element, walking its reduced elements in up to four nested
loops; the host describes the input as kept and reduced dims (see `reduce_layout`). On a GPU, outputs whose
reduced elements form one long contiguous row (a mean over H and W) get a work-group each instead
(`RowGroups`, shared with softmax, layer norm and attention): the group reads the row unit-stride where one
work-item per output would stride by the row length. torch.norm builds the same kernels with its formula
(-DNORM), and so do amax and amin; these and the infinity norms keep the one-per-output kernel, as the
group's reduction would drop a NaN.
F.normalize runs the norm into a buffer of its own, then cl/expression.cl divides.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from kuiper.core.operators import make_operator
from kuiper.layers import reduce
from kuiper.opencl.expression import Expression
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.matmul import Scratch
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up
from kuiper.opencl.strided import ROW_GROUP, contiguous_strides, merge_dims
from kuiper.pnnx.dtypes import numpy_dtype

#: how many kept and how many reduced dims cl/reduce.cl walks (int4 vectors)
CL_DIMS = 4
#: the largest work-group for a row (a power of two: the local reduction halves it)
GROUP_SIZE = 256


class RowGroups:
    """A kernel that gives each contiguous row of its input to one work-group (cl/group_reduce.h). On GPUs the
    group reads the row unit-stride, where one work-item per row would stride by the row length, and long rows
    spread over many cores. On CPUs a work-item takes a row alone (-DROW_EACH), since a core runs a row fastest
    so: PoCL ran Swin's (3136, 96) LayerNorm 7-10x faster than with 128 work-items a row. Its work-groups then
    hold ROW_GROUP rows, where Intel's runtime took 4x as long with a group (and its barriers) per row. Its
    arguments end with the group's local scratch. Layers use it for rows of `shortest` elements or more: on
    GPUs shorter ones run faster one per work-item, as many small groups leave the cores half empty."""

    def __init__(self, rt, file: str, name: str, shortest: int, options=()):
        import pyopencl as cl

        self.each = rt.is_cpu  # a work-item a row
        self.kernel = rt.kernel(file, name, [*options, *(["-DROW_EACH"] if self.each else [])])
        self.shortest = shortest
        limit = min(GROUP_SIZE, rt.device.max_work_group_size, self.kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, rt.device))
        self.largest = 1 if self.each else 1 << (limit.bit_length() - 1)
        self.scratch = cl.LocalMemory(4 * self.largest)

    def takes(self, length: int) -> bool:
        return length >= self.shortest

    def run(self, q, rows: int, length: int, *args) -> None:
        if not rows:  # OpenCL refuses an empty range
            return
        if self.each:  # groups of ROW_GROUP rows where they divide the rows, else the driver's choice
            q.run(self.kernel, (rows,), (ROW_GROUP,) if rows % ROW_GROUP == 0 else None, *args, self.scratch)
            return
        group = min(self.largest, 1 << (length - 1).bit_length())  # no larger than the row needs
        q.run(self.kernel, (rows * group,), (group,), *args, self.scratch)


class Reduce(OpenCLLayer):
    """The OpenCL forward of the sums, means and norms: cl/reduce.cl's two kernels, by the layout of the input."""

    #: whether the sum is divided by the number of reduced elements
    averages = False
    #: the build options of cl/reduce.cl for this reduction
    cl_options = ()
    #: whether the work-group kernel for rows may serve it (on GPUs)
    cl_row_groups = True

    @property
    def supports_opencl(self) -> bool:
        # the kernel adds float32: integer sums (int64 in PyTorch) and other float widths stay on numpy
        return numpy_dtype(self.op.input_operands[0].dtype) == np.float32

    def build_opencl(self, rt):
        self.cl_lines = rt.kernel("reduce.cl", "reduce_lines", self.cl_options)
        # on GPUs a row shorter than 64 is summed as fast by one work-item as by a group
        self.cl_rows = RowGroups(rt, "reduce.cl", "reduce_rows", 64, self.cl_options) \
            if self.cl_row_groups and not rt.is_cpu else None

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        layout = reduce_layout(x.shape, self.axes(x.ndim))
        if layout is None:  # over 4 kept or reduced dims even merged: over 8 dims, never seen in models
            q.run_on_host(self, inputs, outputs)
            return
        kept, kept_strides, reduced, reduced_strides, count = layout
        divisor = np.float32(count if self.averages else 1)
        # one reduced dim, contiguous: the input is (outputs, count) rows
        if self.cl_rows and reduced[0] == count and reduced_strides[0] == 1 and self.cl_rows.takes(count):
            self.cl_rows.run(q, y.size, count, y.buffer, x.buffer, np.int32(count), divisor)
        else:
            q.run(self.cl_lines, (round_up(y.size, 256),), None, y.buffer, x.buffer, np.int32(y.size),
                  kept, kept_strides, reduced, reduced_strides, divisor)


@lru_cache(maxsize=256)
def reduce_layout(shape: tuple, axes: tuple):
    """How cl/reduce.cl walks a contiguous input of `shape` reduced over `axes`: (kept extents, their
    strides, reduced extents, their strides, number of reduced elements), the first four as int32 arrays of
    CL_DIMS, innermost first; None when more than CL_DIMS of either kind remain. Cached per shape.

    Dims are merged as a copy from the input to the output would merge them (kuiper/opencl/strided.py),
    the reduced dims having output stride 0: two reduced neighbours merge, a reduced and a kept one never."""
    kept_axes = [a for a in range(len(shape)) if a not in axes]
    out_strides = dict(zip(kept_axes, contiguous_strides([shape[a] for a in kept_axes])))
    dims = merge_dims(shape, tuple(out_strides.get(a, 0) for a in range(len(shape))), contiguous_strides(shape))
    kept = [(size, stride) for size, out, stride in reversed(dims) if out]
    reduced = [(size, stride) for size, out, stride in reversed(dims) if not out]
    if max(len(kept), len(reduced)) > CL_DIMS:
        return None
    walk = []
    for part in (kept, reduced):
        part = part + [(1, 0)] * (CL_DIMS - len(part))
        walk += [np.array([size for size, _ in part], np.int32), np.array([stride for _, stride in part], np.int32)]
    return (*walk, math.prod(size for size, _ in reduced))


@opencl("torch.sum")
class Sum(Reduce, reduce.Sum):
    pass


@opencl("torch.mean")
class Mean(Reduce, reduce.Mean):
    averages = True


@opencl("torch.amax")
class Amax(Reduce, reduce.Amax):
    cl_options = ("-DNORM=6",)
    cl_row_groups = False


@opencl("torch.amin")
class Amin(Reduce, reduce.Amin):
    cl_options = ("-DNORM=7",)
    cl_row_groups = False


#: cl/reduce.cl's NORM modes for the p that have one of their own; any other finite p is mode 3
NORM_MODES = {0.0: 0, 1.0: 1, 2.0: 2, math.inf: 4, -math.inf: 5}


@opencl("torch.norm")
class Norm(Reduce, reduce.Norm):
    def __init__(self, op):
        super().__init__(op)
        mode = NORM_MODES.get(self.p, 3)
        self.cl_options = (f"-DNORM={mode}",) + ((f"-DP={np.float32(self.p)!s}f",) if mode == 3 else ())
        self.cl_row_groups = not math.isinf(self.p)


@opencl("F.normalize")
class Normalize(OpenCLLayer, reduce.Normalize):
    """The norm as torch.norm's kernel into a buffer of the layer's, then cl/expression.cl divides."""

    def __init__(self, op):

        super().__init__(op)
        self.norm = Norm(self.norm.op)  # the reference's norm, on the same operator, with its OpenCL forward
        self.divide = Expression(make_operator("pnnx.Expression", f"{op.name}.divide",
                                               {"expr": f"div(@0,max(@1,{self.eps!r}))"}, input_shapes=[(), ()]))

    def build_opencl(self, rt):
        self.norm.build_opencl(rt)
        self.divide.build_opencl(rt)
        self.norms = Scratch(rt)

    def forward_opencl(self, q, inputs, outputs):
        if not outputs[0].size:  # OpenCL refuses an empty range
            return
        norm = self.norms.tensor(self.norm.output_shapes([inputs[0].shape])[0], inputs[0].dtype)
        self.norm.forward_opencl(q, inputs, [norm])
        self.divide.forward_opencl(q, [inputs[0], norm], outputs)
