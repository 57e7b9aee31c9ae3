"""Matrix products: torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm and torch.einsum.

torch.matmul follows numpy's matmul: the last two dims hold the matrices and the dims before them are a
batch that broadcasts (a missing or size-1 dim repeats); a 1-D left operand is a row vector and a 1-D
right operand a column vector, whose extra dim leaves the result again. torch.mm and torch.bmm are its 2-D
and 3-D cases without broadcasting; torch.addmm and torch.baddbmm return beta * input + alpha * (mat1 @
mat2). torch.einsum names every dim with a letter: letters of the operands missing from the output are
summed over. The numpy forwards are np.matmul and np.einsum.

On OpenCL every product of two tensors is the batched GEMM of kuiper/opencl/gemm.py. Each layer labels the
dims of its product as an einsum would (`layout`): a label of both operands and the output is a batch dim, one
of the first operand and the output a row of the GEMM (M), one of the second operand and the output a
column (N), one of both operands alone the depth (K). `gemm_layout` then reads the GEMM off the tensors'
strides: a group of labels serves as one GEMM dim where it is evenly spaced in memory, a broadcast dim has
stride 0, and the batch dims become the GEMM's items and groups (beyond two, one launch per index of the
outer ones). The GEMM reads every matrix row-major: where a tensor's depth or columns are not unit-stride
(attention's Q @ K^T written as an einsum), it is copied into that layout first (cl/copy.cl), and the roles
of the operands swap (C^T = B^T A^T) where that copies less.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.expression import Expression
from kuiper.layers.registry import register
from kuiper.opencl.strided import MAX_RANK, StridedCopy, View, contiguous_strides, merge_dims
from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, ROW_BIAS, Gemm, Matrix
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
        from kuiper.opencl import DeviceTensor

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


class Product(Layer):
    """What the products share: the OpenCL forward over `gemm_layout`. Subclasses label their product."""

    #: the inputs multiplied, first and second
    operands = (0, 1)

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


def broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether a tensor of `shape` broadcasts to `target` without changing it (what an added term must do)."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


# ---- torch.matmul and its fixed-rank forms ---------------------------------------------------------------
@register("torch.matmul")
class Matmul(Product):
    num_inputs = 2
    #: the rank both operands must have (torch.mm: 2, torch.bmm: 3); None: torch.matmul's rules
    rank = None

    def output_shapes(self, input_shapes):
        return [self.matmul_shape(*(tuple(input_shapes[i]) for i in self.operands))]

    def matmul_shape(self, a: tuple, b: tuple) -> tuple:
        """The shape of a @ b, or a ShapeError naming both."""
        if self.rank is not None and (len(a) != self.rank or len(b) != self.rank):
            raise self.shape_error(f"multiplies {self.rank}-D tensors, got {a} and {b}")
        if not a or not b:
            raise self.shape_error(f"cannot multiply {a} by {b}: both need at least 1 dim")
        # a vector as a one-row (left) or one-column (right) matrix
        rows_a = a if len(a) > 1 else (1, *a)
        rows_b = b if len(b) > 1 else (*b, 1)
        if rows_a[-1] != rows_b[-2]:
            raise self.shape_error(f"cannot multiply {a} by {b}: {rows_a[-1]} columns against {rows_b[-2]} rows")
        if self.rank == 3 and a[0] != b[0]:
            raise self.shape_error(f"cannot multiply {a} by {b}: batches of {a[0]} and {b[0]}")
        try:
            batch = np.broadcast_shapes(rows_a[:-2], rows_b[:-2])
        except ValueError:
            raise self.shape_error(f"cannot multiply {a} by {b}: batch dims {rows_a[:-2]} and {rows_b[:-2]} do not "
                                   "broadcast") from None
        return tuple(batch) + a[-2:-1] + b[-1:] if len(b) > 1 else tuple(batch) + a[-2:-1]

    def forward_numpy(self, inputs, outputs):
        np.matmul(inputs[self.operands[0]], inputs[self.operands[1]], out=outputs[0])

    def macs(self, input_shapes, output_shapes):
        return math.prod(output_shapes[0]) * input_shapes[self.operands[0]][-1]

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


@register("torch.mm")
class Mm(Matmul):
    rank = 2


@register("torch.bmm")
class Bmm(Matmul):
    rank = 3


@register("torch.addmm")
class Addmm(Matmul):
    """beta * input + alpha * (mat1 @ mat2), input broadcast to the product's shape."""

    num_inputs = 3
    operands = (1, 2)
    rank = 2

    def __init__(self, op):
        super().__init__(op)
        self.alpha = self.float_param("alpha", 1.0)
        self.beta = self.float_param("beta", 1.0)

    def output_shapes(self, input_shapes):
        (shape,) = super().output_shapes(input_shapes)
        added = tuple(input_shapes[0])
        if not broadcasts_to(added, shape):
            raise self.shape_error(f"input {added} does not broadcast to the product's shape {shape}")
        return [shape]

    def forward_numpy(self, inputs, outputs):
        out = outputs[0]
        np.matmul(inputs[1], inputs[2], out=out)
        out *= self.alpha
        if self.beta:  # PyTorch ignores input when beta is 0, NaNs and all
            out += self.beta * inputs[0]

    # ---- OpenCL: the product into the output, then the output scaled and input added by cl/expression.cl
    def build_opencl(self, rt):
        from kuiper.runtime.operators import make_operator  # the runtime imports the layers: not at the top

        super().build_opencl(rt)
        product = "@0" if self.alpha == 1 else f"mul(@0,{self.alpha!r})"
        added = "@1" if self.beta == 1 else f"mul(@1,{self.beta!r})"
        formula = f"add({product},{added})" if self.beta else product
        self.combine = None if formula == "@0" else Expression(make_operator(
            "pnnx.Expression", f"{self.op.name}.combine", params={"expr": formula},
            input_shapes=[self.op.output_operand.shape, self.input_shape(0)]))
        if self.combine is not None:
            self.combine.build_opencl(rt)

    def forward_opencl(self, q, inputs, outputs):
        super().forward_opencl(q, inputs, outputs)
        if self.combine is not None and outputs[0].size:
            self.combine.forward_opencl(q, [outputs[0], inputs[0]], outputs)


@register("torch.baddbmm")
class Baddbmm(Addmm):
    rank = 3


# ---- torch.einsum ----------------------------------------------------------------------------------------
ELLIPSIS = "..."


@register("torch.einsum")
class Einsum(Product):
    """The equation's terms are kept as tuples of labels, "..." standing for the broadcast dims it covers."""

    num_inputs = None

    def __init__(self, op):
        super().__init__(op)
        self.equation = self.str_param("equation").replace(" ", "")
        self.terms, self.output = self.parse(self.equation, len(op.input_operands))
        # written out in full for np.einsum: numpy and PyTorch place the implicit output's labels alike, but
        # stating them leaves nothing to the two to agree on
        self.explicit = ",".join("".join(term) for term in self.terms) + "->" + "".join(self.output)

    def parse(self, equation: str, count: int) -> tuple:
        """(input terms, output term) of `equation`, checked against `count` inputs."""
        inputs, arrow, output = equation.partition("->")
        terms = [self.term(text) for text in inputs.split(",")]
        if len(terms) != count:
            raise self.error(f"equation={equation} has {len(terms)} operand(s), the graph gives {count}")
        labels = [label for term in terms for label in term]
        if not arrow:  # implicit output: the labels seen once, in alphabetical order, after the broadcast dims
            once = sorted(label for label in set(labels) if labels.count(label) == 1 and label != ELLIPSIS)
            return terms, (ELLIPSIS,) * (ELLIPSIS in labels) + tuple(once)
        result = self.term(output)
        if len(set(result)) != len(result) or not set(result) <= set(labels):
            raise self.error(f"equation={equation}: the output must name each of its labels once, all from the "
                             f"operands")
        if (ELLIPSIS in labels) != (ELLIPSIS in result):
            raise self.error(f"equation={equation}: '...' must be in the output if and only if in an operand")
        return terms, result

    def term(self, text: str) -> tuple:
        """The labels of one term: letters, and '...' at most once."""
        before, dots, after = text.partition(ELLIPSIS)
        if not all(char.isascii() and char.isalpha() for char in before + after):
            raise self.error(f"equation={self.equation}: '{text}' is not a term of letters and one '...'")
        return tuple(before) + (ELLIPSIS,) * bool(dots) + tuple(after)

    def expand(self, shapes) -> tuple:
        """The terms at these input shapes with "..." written out: the broadcast dims, aligned on the right,
        labelled by ints from 0; (input terms, output term)."""
        widths = [len(shape) - len(term) + 1 if ELLIPSIS in term else 0 for term, shape in zip(self.terms, shapes)]
        width = max(widths, default=0)
        dims = tuple(range(width))

        def written(term, covered):
            at = term.index(ELLIPSIS) if ELLIPSIS in term else len(term)
            return term[:at] + dims[width - covered:] + term[at + 1:]

        return [written(term, w) for term, w in zip(self.terms, widths)], written(self.output, width)

    def output_shapes(self, input_shapes):
        shapes = [tuple(shape) for shape in input_shapes]
        for i, (term, shape) in enumerate(zip(self.terms, shapes)):
            letters = len(term) - (ELLIPSIS in term)
            if len(shape) < letters or len(shape) > letters and ELLIPSIS not in term:
                raise self.shape_error(f"equation={self.equation}: operand {i} has shape {shape}, its term "
                                       f"'{''.join(term)}' names {letters} dim(s)")
        terms, output = self.expand(shapes)
        sizes = {}
        for i, (term, shape) in enumerate(zip(terms, shapes)):
            seen = {}
            for label, size in zip(term, shape):
                if seen.setdefault(label, size) != size:  # a diagonal takes equal dims
                    raise self.shape_error(f"equation={self.equation}: label '{label}' has sizes {seen[label]} "
                                           f"and {size} in operand {i} {shape}")
                if sizes.get(label, 1) != 1 and size not in (1, sizes[label]):
                    raise self.shape_error(f"equation={self.equation}: label '{label}' is {size} in operand {i} "
                                           f"{shape}, {sizes[label]} in an operand before it ({shapes})")
                sizes[label] = size if sizes.get(label, 1) == 1 else sizes[label]
        return [tuple(sizes[label] for label in output)]

    def forward_numpy(self, inputs, outputs):
        # optimize: numpy plans the order of the products and hands each to BLAS (maxvit's einsums 6x faster)
        np.einsum(self.explicit, *inputs, out=outputs[0], optimize=len(inputs) > 1)

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


# ---- F.linear with its weight and bias as graph tensors --------------------------------------------------
@register("F.linear")
class LinearFunction(Product):
    """y = x @ weight^T + bias over the last axis, weight (out_features, in_features) and bias given as inputs
    (pnnx writes F.linear where they come from a pnnx.Attribute or an expression; nn.Linear, whose weights
    the file stores, is kuiper/layers/linear.py). The bias broadcasts to the output, as in PyTorch."""

    num_inputs = None
    min_inputs = 2

    def __init__(self, op):
        super().__init__(op)
        given = len(op.input_operands)
        if given > 3:
            raise self.error(f"expects input, weight and an optional bias, the graph gives {given} inputs")
        # with two inputs pnnx writes bias=None; a bias given as a parameter would be a constant we do not read
        if self.param("bias", None) is not None:
            raise self.error(f"bias={self.param('bias')!r}: the bias must come as the third input")
        self.has_bias = given == 3

    def output_shapes(self, input_shapes):
        x, weight = tuple(input_shapes[0]), tuple(input_shapes[1])
        if len(weight) != 2:
            raise self.shape_error(f"weight must be 2-D (out_features, in_features), got {weight}")
        if not x or x[-1] != weight[1]:
            raise self.shape_error(f"cannot apply weight {weight} to input {x}: its last dim must be {weight[1]}")
        out = x[:-1] + weight[:1]
        if self.has_bias:
            bias = tuple(input_shapes[2])
            if not broadcasts_to(bias, out):
                raise self.shape_error(f"bias {bias} does not broadcast to the output {out} (weight {weight})")
        return [out]

    def macs(self, input_shapes, output_shapes):
        return math.prod(output_shapes[0]) * input_shapes[1][1]

    def forward_numpy(self, inputs, outputs):
        x, weight = inputs[0], inputs[1]
        # every leading axis folds into the rows of one GEMM, as nn.Linear's do (views of the contiguous arrays)
        np.matmul(x.reshape(-1, x.shape[-1]), weight.T, out=outputs[0].reshape(-1, weight.shape[0]))
        self.add_bias(inputs, outputs[0])

    def add_bias(self, inputs, out) -> None:
        if self.has_bias:
            out += inputs[2]

    def layout(self, shapes):
        rows = tuple(range(len(shapes[0]) - 1))
        return gemm_layout((rows + ("k",), ("n", "k"), rows + ("n",)),
                           (tuple(shapes[0]), tuple(shapes[1]), self.output_shapes(shapes)[0]))

    # ---- OpenCL: the bias as the GEMM's per-column bias --------------------------------------------------
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
