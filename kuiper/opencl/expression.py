"""pnnx.Expression on OpenCL (the layer itself: kuiper/layers/expression.py): the tree is written as one OpenCL
C expression, compiled into cl/expression.cl:

    add(mul(@0,@1),2)    ->   -DEXPR=fn_add(fn_mul(IN(0),IN(1)),2.0f)

so each work-item evaluates the whole formula for one output element, with no intermediate arrays. A
constant expression (no inputs) is computed once at build and copied, like a pnnx.Attribute. On CPU devices
the work-items go by rows of the innermost dim instead (-DROWS), each taking a run of up to ROW_SPAN elements
of one row: long enough to pay for finding the row, short enough to share a long row between cores. There each
input's step along the row, 0 or 1, is built in as a constant (`_row_kernel`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from kuiper.layers import expression
from kuiper.layers.expression_parser import Literal, Operand
from kuiper.opencl.attribute import copy_constant
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import ROW_SPAN, round_up
from kuiper.pnnx.dtypes import numpy_dtype


@opencl("pnnx.Expression")
class Expression(OpenCLLayer, expression.Expression):
    @property
    def supports_opencl(self) -> bool:
        # the kernel computes in float32: integer arithmetic (bitwise functions, inputs recorded as integers)
        # and other float widths stay on numpy. A constant expression has no inputs and any dtype.
        return not self.operands or (not self.bitwise and len(self.operands) <= CL_MAX_INPUTS and all(
            numpy_dtype(self.op.input_operands[i].dtype) == np.float32 for i in self.operands
        ))

    def build_opencl(self, rt):
        if not self.operands:
            self.cl_constant = rt.upload(kept_nonzero(self.run_numpy()[0], rt.stored(np.float32)))
            return
        inputs = ",".join(f"INPUT({i})" for i in self.operands)
        self.cl_rt, self.cl_rows = rt, rt.is_cpu  # work-items by rows of the innermost dim (cl/expression.cl)
        self.cl_options = [f"-DINPUTS={inputs}", f"-DEXPR={opencl_expression(self.tree)}"]
        if self.cl_rows:
            self.cl_options += ["-DROWS", "-DBASES=" + "".join(f"BASE({i})" for i in self.operands)]
            self.cl_kernels = {}  # each input's step along a row (0 or 1) -> the kernel built for them
        else:
            self.cl_kernel = rt.kernel("expression.cl", "expression", self.cl_options)

    def _row_kernel(self, strides: tuple):
        """On CPUs, the kernel built for these inputs' steps along a row, each 0 (broadcast) or 1 (the innermost
        merged dim is the output's innermost of extent over 1, where an input's row-major step is 1 or it is
        broadcast): constants there, so that the loop along the row loads an input in vectors, or once outside
        it (a squeeze-excitation's scale over a plane), as the compiler cannot where the step is an argument."""
        steps = tuple(int(st[0]) for st in strides)
        if steps not in self.cl_kernels:
            options = [f"-DSTEP{i}={step}" for i, step in zip(self.operands, steps)]
            self.cl_kernels[steps] = self.cl_rt.kernel("expression.cl", "expression", [*self.cl_options, *options])
        return self.cl_kernels[steps]

    def forward_opencl(self, q, inputs, outputs):
        out = outputs[0]
        if not self.operands:
            copy_constant(q, self.cl_constant, out)
            return
        layout = broadcast_layout(out.shape, tuple(inputs[i].shape for i in self.operands))
        if layout is None:  # over 8 dims even merged: beyond the kernel's vectors, and never seen in models
            q.run_on_host(self, inputs, outputs)
            return
        ndim, dims, strides = layout
        pairs = [arg for i, st in zip(self.operands, strides) for arg in (inputs[i].buffer, st)]
        row = int(dims[0])
        span = min(row, ROW_SPAN) if self.cl_rows else 1  # elements per work-item
        size = (-(-row // span), out.size // row) if self.cl_rows else (round_up(out.size, 256), 1)
        kernel = self._row_kernel(strides) if self.cl_rows else self.cl_kernel
        q.run(kernel, size, None, out.buffer, out.size, span, ndim, dims, *pairs)


def kept_nonzero(value: np.ndarray, storage: np.dtype) -> np.ndarray:
    """A float32 constant to upload at `storage`: as it is, but a nonzero value too small for `storage` becomes
    the least value that stores, with its sign, where rounding would give 0. Such constants are epsilons that
    must not vanish: swin_v2's F.normalize divides by clamp_min(norm, 1e-12), in half 0 / 0 for a zero row."""
    if value.dtype != np.float32 or storage == value.dtype:
        return value
    least = np.finfo(storage).smallest_subnormal
    return np.where((value != 0) & (np.abs(value) < least), np.copysign(least, value), value).astype(value.dtype)


def opencl_expression(tree) -> str:
    """The tree as OpenCL C over cl/expression.cl's IN(k) and fn_<name>, without spaces (it travels as a
    -D build option): add(mul(@0,@1),2) -> fn_add(fn_mul(IN(0),IN(1)),2.0f)."""
    if isinstance(tree, Operand):
        return f"IN({tree.index})"
    if isinstance(tree, Literal):
        # the float32 numpy computes with, written shortest so that it reads back as that very float32
        value = np.float32(tree.value)
        if np.isnan(value):
            return "NAN"
        if np.isinf(value):
            return "-INFINITY" if value < 0 else "INFINITY"
        return f"{value!s}f"  # str, not format: format would print the float64 of the float32
    return f"fn_{tree.name}({','.join(opencl_expression(arg) for arg in tree.args)})"


#: how many dims cl/expression.cl walks: its extents and strides are int8 vectors
CL_DIMS = 8
#: OpenCL promises 1024 bytes of kernel arguments: 48 for the output's, 40 per input (pointer and strides)
CL_MAX_INPUTS = 24


@lru_cache(maxsize=256)
def broadcast_layout(out_shape: tuple, in_shapes: tuple):
    """How cl/expression.cl walks the output and the inputs: (ndim, dims, (strides of each input, ...)),
    dims and strides as int32 arrays of CL_DIMS (the kernel's int8), innermost dim first; None when more
    than CL_DIMS dims remain. Cached: a graph meets the same few shapes on every forward.

    An input's strides are its row-major strides over the output's dims, 0 where it is broadcast. Dims of
    extent 1 are dropped, and a dim merges into the one outside it when, for every input, one step of the
    outer dim equals a walk over the whole inner one (both contiguous, or both broadcast): inputs of the
    output's shape, or scalars, leave a single dim."""
    strides = []
    for shape in in_shapes:
        padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        column, step = [], 1
        for extent in reversed(padded):
            column.append(step if extent > 1 else 0)
            step *= extent
        strides.append(column[::-1])
    merged = []  # [extent, [stride of each input]], outermost first
    for d, extent in enumerate(out_shape):
        if extent == 1:
            continue
        inner = [s[d] for s in strides]
        if merged and all(outer == stride * extent for outer, stride in zip(merged[-1][1], inner)):
            merged[-1] = [merged[-1][0] * extent, inner]
        else:
            merged.append([extent, inner])
    if len(merged) > CL_DIMS:
        return None
    merged = merged[::-1] or [[1, [0] * len(in_shapes)]]
    padding = CL_DIMS - len(merged)
    dims = np.array([extent for extent, _ in merged] + [1] * padding, np.int32)
    per_input = tuple(np.array([inner[k] for _, inner in merged] + [0] * padding, np.int32)
                      for k in range(len(in_shapes)))
    return len(merged), dims, per_input
