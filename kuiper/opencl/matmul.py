"""The matrix products on OpenCL (the layers themselves: kuiper/layers/matmul.py): every product of two tensors
is the batched GEMM of kuiper/opencl/gemm.py. Each layer labels the dims of its product as an einsum would
(`layout`): a label of both operands and the output is a batch dim, one of the first operand and the output a
row of the GEMM (M), one of the second operand and the output a column (N), one of both operands alone the
depth (K). `gemm_layout` then reads the GEMM off the tensors' strides: a group of labels serves as one GEMM dim
where it is evenly spaced in memory, a broadcast dim has stride 0, and the batch dims become the GEMM's items
and groups (beyond two, one launch per index of the outer ones). The GEMM reads every matrix row-major: where a
tensor's depth or columns are not unit-stride (attention's Q @ K^T written as an einsum), it is copied into
that layout first (cl/copy.cl), and the roles of the operands swap (C^T = B^T A^T) where that copies less. The
GEMM's own variants and the rule choosing between them are kuiper/opencl/gemm.py's.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from kuiper.core.operators import make_operator
from kuiper.layers import matmul
from kuiper.opencl import expression
from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, ROW_BIAS, Gemm, Matrix
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import DeviceTensor
from kuiper.opencl.strided import MAX_RANK, StridedCopy, View, contiguous_strides, merge_dims
from kuiper.pnnx.dtypes import numpy_dtype


# ---- the GEMM of a labelled product ---------------------------------------------------------------------
class Side(NamedTuple):
    """One matrix of the GEMM: its leading dimension, and where the tensor's own layout does not serve, the
    copy into a contiguous scratch buffer that does (`shape` walked, `strides` into the tensor)."""

    ld: int
    shape: tuple = ()
    strides: tuple | None = None


class GemmLayout(NamedTuple):
    """The batched GEMM that computes a product: C = X @ Y with X, Y the operands in order, or swapped."""

    swap: bool
    m: int
    n: int
    k: int
    x: Side
    y: Side
    c: Side
    batch: tuple     # (size, x stride, y stride, c stride) per batch dim, merged, outermost first
    copied: int      # elements the copies move


def label_strides(labels, shape) -> dict:
    """Each label's stride in a contiguous tensor of `shape`; 0 for a dim of size 1, which broadcasts."""
    return {label: stride if size != 1 else 0
            for label, size, stride in zip(labels, shape, contiguous_strides(shape))}


def spacing(group, sizes: dict, strides: dict):
    """The stride that walks the labels of `group` as one dim (its innermost's), 0 when they hold one
    element; None when they are not evenly spaced in memory."""
    dims = [(sizes[label], strides[label]) for label in group if sizes[label] != 1]
    if any(outer != inner * size for (_, outer), (size, inner) in zip(dims, dims[1:])):
        return None
    return dims[-1][1] if dims else 0


def matrix_side(labels, shape, groups, sizes):
    """Side of a tensor read as the matrices (rows, cols) = groups[1:], batched over groups[0], with the
    strides the GEMM then finds each label at; None when a copy would walk more dims than cl/copy.cl."""
    batch, rows, cols = groups
    strides = label_strides(labels, shape)
    ld, unit = spacing(rows, sizes, strides), spacing(cols, sizes, strides)
    if ld is not None and (unit == 1 or math.prod(sizes[label] for label in cols) <= 1):
        return Side(ld), strides
    # the copy keeps the tensor's own size in a batch dim that broadcasts, and expands any other
    order = batch + rows + cols
    own = dict(zip(labels, shape))
    walked = tuple(own[label] if label in batch else sizes[label] for label in order)
    source = tuple(strides[label] for label in order)
    if len(merge_dims(walked, contiguous_strides(walked), source)) > MAX_RANK:
        return None
    copy_strides = label_strides(order, walked)
    cols_size = math.prod(sizes[label] for label in cols)
    return Side(cols_size, walked, source), copy_strides


@lru_cache(maxsize=256)
def gemm_layout(labels: tuple, shapes: tuple):
    """The GemmLayout of the product labelled `labels` = (first operand, second operand, output) on
    contiguous tensors of `shapes`, the one that copies least; None where it is not a GEMM (a label repeated
    within one tensor, or one summed within one operand) or a copy walks more dims than cl/copy.cl. Cached."""
    a, b, c = labels
    if any(len(set(term)) != len(term) for term in labels) or (set(a) ^ set(b)) - set(c):
        return None
    sizes = {}
    for term, shape in zip(labels, shapes):
        for label, size in zip(term, shape):
            sizes[label] = size if sizes.get(label, 1) == 1 else sizes[label]
    batch = tuple(label for label in c if label in a and label in b)
    rows = tuple(label for label in c if label in a and label not in b)
    cols = tuple(label for label in c if label in b and label not in a)
    depth = tuple(label for label in a if label in b and label not in c)
    layouts = [_orient(False, (a, b, c), shapes, (batch, rows, cols, depth), sizes),
               _orient(True, (b, a, c), (shapes[1], shapes[0], shapes[2]), (batch, cols, rows, depth), sizes)]
    layouts = [layout for layout in layouts if layout is not None]
    return min(layouts, key=lambda layout: layout.copied) if layouts else None


def _orient(swap, labels, shapes, groups, sizes):
    """The layout with X labelled labels[0] and Y labels[1]: X holds (batch, rows, depth), Y (batch, depth,
    cols), C (batch, rows, cols)."""
    batch, rows, cols, depth = groups
    sides = [matrix_side(labels[0], shapes[0], (batch, rows, depth), sizes),
             matrix_side(labels[1], shapes[1], (batch, depth, cols), sizes),
             matrix_side(labels[2], shapes[2], (batch, rows, cols), sizes)]
    if None in sides:
        return None
    (x, x_strides), (y, y_strides), (c, c_strides) = sides
    merged = []
    for label in batch:
        dim = (sizes[label], x_strides[label], y_strides[label], c_strides[label])
        if dim[0] == 1:
            continue
        if merged and all(outer == inner * dim[0] for outer, inner in zip(merged[-1][1:], dim[1:])):
            merged[-1] = (merged[-1][0] * dim[0], *dim[1:])
        else:
            merged.append(dim)
    m, n, k = (math.prod(sizes[label] for label in group) for group in (rows, cols, depth))
    # the innermost batch dim, where Y is the same for all its products and X and C hold their rows one after
    # another, is more rows: one larger GEMM instead of a stack (a batch of inputs times one matrix)
    while merged and merged[-1][2] == 0 and (m == 1 or merged[-1][1::2] == (m * x.ld, m * c.ld)):
        size, x_stride, _, c_stride = merged.pop()
        x, c = (x, c) if m > 1 else (x._replace(ld=x_stride), c._replace(ld=c_stride))
        m *= size
    copied = sum(math.prod(side.shape) for side in (x, y, c) if side.strides is not None)
    return GemmLayout(swap, m, n, k, x, y, c, tuple(merged), copied)


class Scratch:
    """A device buffer a layer keeps between forwards for its copies, grown when a product needs more."""

    def __init__(self, rt):
        self.rt = rt
        self.buffer = None
        self.nbytes = 0

    def tensor(self, shape, dtype):
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if self.buffer is None or nbytes > self.nbytes:  # a buffer even for no bytes: kernels take it as argument
            self.buffer, self.nbytes = self.rt.allocate(nbytes), nbytes
        return DeviceTensor(self.rt, self.buffer, shape, dtype)


class BatchedGemm:
    """A layer's batched GEMM on one runtime: the copies a GemmLayout asks for, and the launches."""

    def __init__(self, rt):
        self.gemm = Gemm(rt)
        self.copier = StridedCopy(rt)
        self.scratch = [Scratch(rt) for _ in range(3)]  # for X, Y and C

    def __call__(self, q, layout: GemmLayout, a, b, c, variant, bias=None):
        """Enqueue c = a @ b as `layout` says. bias: a buffer of one value per column of c, for a product with
        no batch dims."""
        x, y = (b, a) if layout.swap else (a, b)
        x, y = self.stage(q, layout.x, x, self.scratch[0]), self.stage(q, layout.y, y, self.scratch[1])
        out = c if layout.c.strides is None else self.scratch[2].tensor(layout.c.shape, c.dtype)
        options = dict(bias=bias, bias_mode=NO_BIAS if bias is None else ROW_BIAS if layout.swap else COLUMN_BIAS,
                       variant=variant)
        # the two innermost batch dims are the GEMM's items and groups (size 1 where there are fewer), one
        # launch per index of the dims outside them; each dim is (size, x stride, y stride, c stride)
        dims = ((1, 0, 0, 0),) * (2 - len(layout.batch)) + layout.batch
        outer, (items, *item), (groups, *group) = dims[:-2], dims[-2], dims[-1]
        for index in np.ndindex(*(dim[0] for dim in outer)):
            at = [sum(i * dim[side] for i, dim in zip(index, outer)) for side in (1, 2, 3)]
            x_, y_, c_ = (Matrix(t.buffer, side.ld, group[s], item[s], at[s])
                          for s, (t, side) in enumerate(((x, layout.x), (y, layout.y), (out, layout.c))))
            self.gemm(q, layout.m, layout.n, layout.k, c=c_, a=x_, b=y_, groups=groups, items=items, **options)
        if out is not c:
            self.copier(q, layout.c.shape, View(c, layout.c.strides), View(out, contiguous_strides(layout.c.shape)))

    def stage(self, q, side: Side, tensor, scratch):
        """The tensor the GEMM reads for this side: `tensor` itself, or its copy in the layout it needs."""
        if side.strides is None:
            return tensor
        copy = scratch.tensor(side.shape, tensor.dtype)
        self.copier(q, side.shape, View(copy, contiguous_strides(side.shape)), View(tensor, side.strides))
        return copy


class Product(OpenCLLayer):
    """What the products share on OpenCL: the forward over `gemm_layout`. Subclasses label their product and
    name the inputs it multiplies (`operands`)."""

    def layout(self, shapes):
        """The GemmLayout of the product at these input shapes (None: run it on the host)."""
        raise NotImplementedError(f"{type(self).__name__} must implement layout")

    @property
    def supports_opencl(self) -> bool:
        # the GEMM multiplies float32
        return all(numpy_dtype(operand.dtype) == np.float32 for operand in self.op.input_operands)

    def build_opencl(self, rt):
        self.product = BatchedGemm(rt)
        self.variants = self.product.gemm.choices(self.gemm_dims)

    def forward_opencl(self, q, inputs, outputs):
        if not outputs[0].size:  # OpenCL refuses an empty range
            return
        shapes = tuple(x.shape for x in inputs)
        layout = self.layout(shapes)
        if layout is None:  # a copy beyond cl/copy.cl's dims: never seen in models
            q.run_on_host(self, inputs, outputs)
            return
        first, second = (inputs[i] for i in self.operands)
        self.product(q, layout, first, second, outputs[0], self.variants.pick(shapes))

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack) of the GEMM at these input shapes, for the rule choosing its variant."""
        layout = self.layout(shapes)
        if layout is None:
            return 1, 1, 1
        return layout.m, layout.n, math.prod(dim[0] for dim in layout.batch)


# ---- torch.matmul and its fixed-rank forms ---------------------------------------------------------------
@opencl("torch.matmul")
class Matmul(Product, matmul.Matmul):
    def layout(self, shapes):
        # both operands as stacks of matrices of one rank (a vector a matrix of one row or column, a missing
        # batch dim one of size 1), the output with the dims a vector operand drops: the same memory
        a, b = (tuple(shapes[i]) for i in self.operands)
        a, b = a if len(a) > 1 else (1, *a), b if len(b) > 1 else (*b, 1)
        rank = max(len(a), len(b))
        a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
        out = tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])
        batch = tuple(range(rank - 2))
        return gemm_layout((batch + ("m", "k"), batch + ("k", "n"), batch + ("m", "n")), (a, b, out))


@opencl("torch.mm")
class Mm(Matmul, matmul.Mm):
    pass


@opencl("torch.bmm")
class Bmm(Matmul, matmul.Bmm):
    pass


@opencl("torch.addmm")
class Addmm(Matmul, matmul.Addmm):
    """The product into the output, then the output scaled and input added by cl/expression.cl."""

    def build_opencl(self, rt):

        super().build_opencl(rt)
        product = "@0" if self.alpha == 1 else f"mul(@0,{self.alpha!r})"
        added = "@1" if self.beta == 1 else f"mul(@1,{self.beta!r})"
        formula = f"add({product},{added})" if self.beta else product
        self.combine = None if formula == "@0" else expression.Expression(make_operator(
            "pnnx.Expression", f"{self.op.name}.combine", params={"expr": formula},
            input_shapes=[self.op.output_operand.shape, self.input_shape(0)]))
        if self.combine is not None:
            self.combine.build_opencl(rt)

    def forward_opencl(self, q, inputs, outputs):
        super().forward_opencl(q, inputs, outputs)
        if self.combine is not None and outputs[0].size:
            self.combine.forward_opencl(q, [outputs[0], inputs[0]], outputs)


@opencl("torch.baddbmm")
class Baddbmm(Addmm, matmul.Baddbmm):
    pass


# ---- torch.einsum ----------------------------------------------------------------------------------------
@opencl("torch.einsum")
class Einsum(Product, matmul.Einsum):
    #: the GEMM's two operands (supports_opencl refuses other counts)
    operands = (0, 1)

    def layout(self, shapes):
        terms, output = self.expand(shapes)
        return gemm_layout((*terms, output), (*map(tuple, shapes), self.output_shapes(shapes)[0]))

    @property
    def supports_opencl(self) -> bool:
        # one GEMM: two operands, no label repeated within one (a diagonal) or summed within one operand alone
        if len(self.terms) != 2 or not super().supports_opencl:
            return False
        first, second = (set(term) for term in self.terms)
        return all(len(set(term)) == len(term) for term in self.terms) and not (first ^ second) - set(self.output)


# ---- F.linear ---------------------------------------------------------------------------------------------
@opencl("F.linear")
class LinearFunction(Product, matmul.LinearFunction):
    """x @ weight^T as a GEMM over the rows of x, the bias the GEMM's per-column bias."""

    def layout(self, shapes):
        rows = tuple(range(len(shapes[0]) - 1))
        return gemm_layout((rows + ("k",), ("n", "k"), rows + ("n",)),
                           (tuple(shapes[0]), tuple(shapes[1]), self.output_shapes(shapes)[0]))

    def build_opencl(self, rt):
        super().build_opencl(rt)
        self.one_bias = Scratch(rt)  # a bias of one value, repeated for every column

    def forward_opencl(self, q, inputs, outputs):
        out = outputs[0]
        if not out.size:
            return
        shapes = tuple(x.shape for x in inputs)
        layout = self.layout(shapes)
        bias = inputs[2] if self.has_bias else None
        # the GEMM adds one value per column: a bias that varies along another dim runs on the host
        if layout is None or bias is not None and math.prod(bias.shape[:-1]) != 1:
            q.run_on_host(self, inputs, outputs)
            return
        if bias is not None and bias.size == 1 < out.shape[-1]:
            repeated = self.one_bias.tensor((out.shape[-1],), bias.dtype)
            self.product.copier(q, repeated.shape, View(repeated, (1,)), View(bias, (0,)))
            bias = repeated
        self.product(q, layout, inputs[0], inputs[1], out, self.variants.pick(shapes),
                     bias=None if bias is None else bias.buffer)
