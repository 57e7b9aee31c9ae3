"""torch.sum, torch.mean and torch.norm over some dimensions (all of them when no dim is given), keeping them
as size 1 with keepdim; and F.normalize, which divides by a norm.

On OpenCL (cl/reduce.cl) one work-item computes one output element, walking its reduced elements in up to
four nested loops; the host describes the input as kept and reduced dims (see `reduce_layout`). On a GPU,
outputs whose reduced elements form one long contiguous row (a mean over H and W) get a work-group each
instead (`RowGroups`, shared with softmax).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.expression import Expression
from kuiper.layers.matmul import Scratch
from kuiper.layers.registry import register
from kuiper.opencl.strided import contiguous_strides, merge_dims
from kuiper.opencl import round_up
from kuiper.pnnx.dtypes import numpy_dtype

#: how many kept and how many reduced dims cl/reduce.cl walks (int4 vectors)
CL_DIMS = 4
#: the largest work-group for a row (a power of two: the local reduction halves it)
GROUP_SIZE = 256


class RowGroups:
    """A kernel that gives each contiguous row of its input to one work-group (cl/group_reduce.h). On GPUs the
    group reads the row unit-stride, where one work-item per row would stride by the row length, and long rows
    spread over many cores. On CPUs the group is one work-item, since a core runs a row fastest alone: PoCL ran
    Swin's (3136, 96) LayerNorm 7-10x faster so than with 128 work-items a row. Its arguments end with the
    group's local scratch. Layers use it for rows of `shortest` elements or more: on GPUs shorter ones run
    faster one per work-item, as many small groups leave the cores half empty."""

    def __init__(self, rt, file: str, name: str, shortest: int, options=()):
        import pyopencl as cl

        self.kernel = rt.kernel(file, name, options)
        self.shortest = shortest
        limit = min(GROUP_SIZE, rt.device.max_work_group_size, self.kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, rt.device))
        self.largest = 1 if rt.is_cpu else 1 << (limit.bit_length() - 1)
        self.scratch = cl.LocalMemory(4 * self.largest)

    def takes(self, length: int) -> bool:
        return length >= self.shortest

    def run(self, q, rows: int, length: int, *args) -> None:
        if rows:  # OpenCL refuses an empty range
            group = min(self.largest, 1 << (length - 1).bit_length())  # no larger than the row needs
            q.run(self.kernel, (rows * group,), (group,), *args, self.scratch)


class Reduce(Layer):
    #: the numpy reduction, called as reduction(x, axis=..., keepdims=..., out=...)
    reduction: staticmethod
    #: whether the OpenCL sum is divided by the number of reduced elements
    averages: bool

    def __init__(self, op):
        super().__init__(op)
        dim = self.param("dim", None)
        # pnnx writes dim=(1) for dim=1 and dim=None (or nothing) for "all"; PyTorch reads dim=[] as all too
        if dim is None or dim in ([], ()):
            self.dims = None
        else:
            self.dims = (dim,) if isinstance(dim, int) and not isinstance(dim, bool) else self.ints_param("dim")
        self.keepdim = self.bool_param("keepdim", False)

    def axes(self, ndim: int) -> tuple:
        """The dims to reduce as non-negative axes of an ndim-D input."""
        if self.dims is None:
            return tuple(range(ndim))
        if not all(-ndim <= d < ndim for d in self.dims):
            raise self.shape_error(f"dim={list(self.dims)} is out of range for a {ndim}-D input")
        axes = tuple(d % ndim for d in self.dims)
        if len(set(axes)) != len(axes):
            raise self.shape_error(f"dim={list(self.dims)} names a dimension twice")
        return axes

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        axes = self.axes(len(shape))
        if self.keepdim:
            return [tuple(1 if a in axes else size for a, size in enumerate(shape))]
        return [tuple(size for a, size in enumerate(shape) if a not in axes)]

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        self.reduction(x, axis=self.axes(x.ndim), keepdims=self.keepdim, out=outputs[0])

    # ---- OpenCL ---------------------------------------------------------------------------------------
    @property
    def supports_opencl(self) -> bool:
        # the kernel adds float32: integer sums (int64 in PyTorch) and other float widths stay on numpy
        return numpy_dtype(self.op.input_operands[0].dtype) == np.float32

    #: the build options of cl/reduce.cl for this reduction
    cl_options = ()
    #: whether the work-group kernel for rows may serve it (on GPUs)
    cl_row_groups = True

    def build_opencl(self, rt):
        self.cl_lines = rt.kernel("reduce.cl", "reduce_lines", self.cl_options)
        # sums of rows shorter than 64 ran as fast or faster one per work-item (H100)
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


@register("torch.sum")
class Sum(Reduce):
    reduction = staticmethod(np.sum)
    averages = False

    def output_dtypes(self, input_dtypes):
        # PyTorch sums booleans and integers into int64
        dtype = input_dtypes[0] if input_dtypes else np.dtype(np.float32)
        return [np.dtype(np.int64) if dtype.kind in "biu" else dtype]


@register("torch.mean")
class Mean(Reduce):
    reduction = staticmethod(np.mean)
    averages = True


#: cl/reduce.cl's NORM modes for the p that have one of their own; any other finite p is mode 3
NORM_MODES = {0.0: 0, 1.0: 1, 2.0: 2, math.inf: 4, -math.inf: 5}


@register("torch.norm")
class Norm(Reduce):
    """The p-norm (sum |x|^p)^(1/p): p=inf is the largest |x|, p=-inf the smallest, p=0 the count of nonzeros.
    pnnx writes torch.linalg.vector_norm as torch.norm too, and the Frobenius norm as p=2."""

    averages = False

    def __init__(self, op):
        super().__init__(op)
        # torch.norm's p='fro' over any dims is the 2-norm of the elements (pnnx writes it as p=2 already)
        self.p = 2.0 if self.param("p", None) == "fro" else self.float_param("p", 2.0, finite=False)
        mode = NORM_MODES.get(self.p, 3)
        self.cl_options = (f"-DNORM={mode}",) + ((f"-DP={np.float32(self.p)!s}f",) if mode == 3 else ())
        self.cl_row_groups = not math.isinf(self.p)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        # as in PyTorch: the norms with no value for no elements (no sum that starts at 0) are refused
        if (self.p < 0 or self.p == math.inf) and any(shape[a] == 0 for a in self.axes(len(shape))):
            raise self.shape_error(f"p={self.p} has no value over an empty dim: input {shape}")
        return super().output_shapes(input_shapes)

    def forward_numpy(self, inputs, outputs):
        out, magnitude = outputs[0], np.abs(inputs[0])
        reduce = dict(axis=self.axes(magnitude.ndim), keepdims=self.keepdim, out=out)
        if self.p == math.inf:
            np.max(magnitude, **reduce)
        elif self.p == -math.inf:
            np.min(magnitude, **reduce)
        elif self.p == 0:
            np.sum(magnitude != 0, **reduce)
        else:
            with np.errstate(divide="ignore"):  # a negative p makes |0|^p infinite, as in PyTorch
                np.sum(magnitude ** self.p, **reduce)
                np.power(out, 1 / self.p, out=out)

    def output_dtypes(self, input_dtypes):
        # a norm is fractional: float inputs keep their width, others give PyTorch's default float
        dtype = input_dtypes[0] if input_dtypes else np.dtype(np.float32)
        return [dtype if dtype.kind == "f" else np.dtype(np.float32)]


@register("F.normalize")
class Normalize(Layer):
    """x / max(||x||_p, eps) along `dim`: the vectors along dim scaled to norm 1. On OpenCL the norm runs as
    torch.norm's kernel into a buffer of the layer's, then cl/expression.cl divides."""

    def __init__(self, op):
        from kuiper.runtime.operators import make_operator  # the runtime imports the layers: not at the top

        super().__init__(op)
        self.eps = self.float_param("eps", 1e-12)
        norm = dict(dim=[self.int_param("dim", 1)], keepdim=True, p=self.float_param("p", 2.0, finite=False))
        self.norm = Norm(make_operator("torch.norm", f"{op.name}.norm", norm, input_shapes=[self.input_shape(0)]))
        self.divide = Expression(make_operator("pnnx.Expression", f"{op.name}.divide",
                                               {"expr": f"div(@0,max(@1,{self.eps!r}))"}, input_shapes=[(), ()]))

    def output_shapes(self, input_shapes):
        self.norm.output_shapes(input_shapes)
        return [tuple(input_shapes[0])]

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        (norm,) = self.norm.run_numpy(x)
        np.divide(x, np.maximum(norm, self.eps, out=norm), out=outputs[0])

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
