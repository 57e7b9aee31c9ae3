"""Matrix products: torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm and torch.einsum.

torch.matmul follows numpy's matmul: the last two dims hold the matrices and the dims before them are a
batch that broadcasts (a missing or size-1 dim repeats); a 1-D left operand is a row vector and a 1-D
right operand a column vector, whose extra dim leaves the result again. torch.mm and torch.bmm are its 2-D
and 3-D cases without broadcasting; torch.addmm and torch.baddbmm return beta * input + alpha * (mat1 @
mat2). torch.einsum names every dim with a letter: letters of the operands missing from the output are
summed over. The numpy forwards are np.matmul and np.einsum.

On OpenCL every product of two tensors is a batched GEMM (kuiper/opencl/matmul.py).
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


def broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether a tensor of `shape` broadcasts to `target` without changing it (what an added term must do)."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


# ---- torch.matmul and its fixed-rank forms ---------------------------------------------------------------
@register("torch.matmul")
class Matmul(Layer):
    num_inputs = 2
    #: the inputs multiplied, first and second
    operands = (0, 1)
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


@register("torch.baddbmm")
class Baddbmm(Addmm):
    rank = 3


# ---- torch.einsum ----------------------------------------------------------------------------------------
ELLIPSIS = "..."


@register("torch.einsum")
class Einsum(Layer):
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


# ---- F.linear with its weight and bias as graph tensors --------------------------------------------------
@register("F.linear")
class LinearFunction(Layer):
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
