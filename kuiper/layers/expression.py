"""pnnx.Expression: element-wise arithmetic that pnnx fused into one operator, e.g. expr=add(mul(@0,@1),@2).

At build the text is parsed (kuiper/layers/expression_parser.py), every function and operand is checked,
and the tree is compiled to a flat program in reverse Polish form, so forward does no parsing:

    add(mul(@0,@1),@2)   ->   input 0, input 1, apply multiply/2, input 2, apply add/2

Forward runs the program on a stack, KuiperInfer's way: an input or a constant is pushed, a function pops
its arguments and pushes its result. Each function is a numpy ufunc (or a few ufuncs) called with `out=`,
so the result lands where it is wanted: the last one in the output array, the others in an argument's
scratch array when it has the right shape, else in the output array while it is free, else in a new array.
`add(mul(@0,@1),@2)` therefore makes no temporary at all: mul writes the output, add updates it in place.

Operands broadcast the numpy (and PyTorch) way; a number in the text is a scalar that mixes with anything.
The numpy backend runs the same program block by block over kuiper's threads where no operand broadcasts
(kuiper/cpu/expression.py).

On OpenCL the tree is written as one OpenCL C expression instead, compiled into cl/expression.cl:

    add(mul(@0,@1),2)    ->   -DEXPR=fn_add(fn_mul(IN(0),IN(1)),2.0f)

so each work-item evaluates the whole formula for one output element, with no intermediate arrays. A
constant expression (no inputs) is computed once at build and copied, like a pnnx.Attribute.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from kuiper.layers.attribute import copy_constant
from kuiper.layers.base import Layer
from kuiper.layers.elementwise import erf
from kuiper.layers.expression_parser import Apply, ExpressionSyntaxError, Literal, Operand, parse, to_rpn
from kuiper.layers.registry import register
from kuiper.opencl.runtime import ROW_SPAN, round_up
from kuiper.pnnx.dtypes import numpy_dtype


def _rsqrt(x, out):
    np.sqrt(x, out=out)
    return np.divide(1.0, out, out=out)


def _reciprocal(x, out):
    # not np.reciprocal: on integers it divides in integers (1/2 -> 0); torch.reciprocal gives floats
    return np.divide(1.0, x, out=out)


# Every function pnnx writes into an expression (pnnx's fuse_expression pass), by number of arguments.
UNARY = {
    "neg": np.negative, "abs": np.absolute, "sign": np.sign,
    "square": np.square, "sqrt": np.sqrt, "rsqrt": _rsqrt, "reciprocal": _reciprocal,
    "exp": np.exp, "log": np.log, "log10": np.log10, "erf": erf,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": np.rint,  # halves to even, like torch.round
    "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,  # takes the divisor's sign, like torch.remainder and Python's %
    "fmod": np.fmod,            # takes the dividend's sign, like torch.fmod and C's fmod
    "pow": np.power,
    "max": np.maximum, "maximum": np.maximum, "min": np.minimum, "minimum": np.minimum,
    "atan2": np.arctan2, "logaddexp": np.logaddexp,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lshift": np.left_shift, "rshift": np.right_shift,
}
# functions whose result is fractional even for integer inputs: PyTorch gives its default float dtype
FLOAT_VALUED = frozenset({
    "sqrt", "rsqrt", "reciprocal", "exp", "log", "log10", "erf", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "div", "atan2", "logaddexp",
})
# functions defined for integer and bool tensors only
BITWISE = frozenset({"and", "or", "xor", "lshift", "rshift"})


@register("pnnx.Expression")
class Expression(Layer):
    num_inputs = None
    min_inputs = 0  # pnnx writes constant expressions such as `expr=0.5` with no inputs
    #: the expression of a subclass serving an operator pnnx writes as a type of its own (kuiper/layers/
    #: aten.py); None: the operator's `expr` parameter
    formula: str | None = None

    def __init__(self, op):
        super().__init__(op)
        text = self.formula or self.str_param("expr")
        shown = text if len(text) <= 120 else text[:100] + "..."  # messages stay one readable line
        try:
            self.tree = parse(text)
            rpn = to_rpn(self.tree)
        except ExpressionSyntaxError as e:
            raise self.error(f"malformed expr={shown!r}: {e}") from None
        # the program: ("input", index) | ("constant", number) | ("apply", (function, arity))
        self.program = [self._compile(item, shown) for item in rpn]
        self.operands = sorted({item.index for item in rpn if isinstance(item, Operand)})
        names = {item.name for item in rpn if isinstance(item, Apply)}
        self.float_valued = bool(names & FLOAT_VALUED) or any(
            isinstance(item, Literal) and isinstance(item.value, float) for item in rpn
        )
        self.bitwise = sorted(names & BITWISE)

    def _compile(self, item, text):
        if isinstance(item, Operand):
            given = len(self.op.input_operands)
            if item.index >= given:
                raise self.error(f"expr={text!r} uses @{item.index}, but the operator has {given} input(s)")
            return "input", item.index
        if isinstance(item, Literal):
            return "constant", item.value
        for arity, table in ((1, UNARY), (2, BINARY)):
            if item.name in table:
                if item.arity != arity:
                    raise self.error(f"'{item.name}' takes {arity} argument(s), not {item.arity}: expr={text!r}")
                return "apply", (table[item.name], arity)
        raise self.error(f"unknown function '{item.name}' in expr={text!r}")

    def output_shapes(self, input_shapes):
        shapes = [tuple(input_shapes[i]) for i in self.operands]
        try:
            return [tuple(np.broadcast_shapes(*shapes))]
        except ValueError:
            raise self.shape_error(f"input shapes {', '.join(map(str, shapes))} do not broadcast") from None

    def output_dtypes(self, input_dtypes):
        # PyTorch's rules, near enough: inputs promote together (constants alone: int64, as torch.tensor(2));
        # integers stay integers unless a fraction comes in (a float constant, or a function such as div or
        # sqrt), which gives float32
        dtypes = [input_dtypes[i] for i in self.operands]
        dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.int64)
        integral = dtype.kind in "biu"
        if integral and self.float_valued:
            dtype = np.dtype(np.float32)
        if not integral and self.bitwise:
            raise self.error(f"bitwise {', '.join(self.bitwise)} needs integer or bool inputs, got {dtype}")
        return [dtype]

    def forward_numpy(self, inputs, outputs):
        self.evaluate(inputs, outputs[0])

    def evaluate(self, inputs, out):
        """Run the program on these inputs into `out`. `inputs` is indexed by input number (`@k`), so it may
        be a list of every input or a dict of the ones the expression reads."""
        stack = []  # (value, scratch): scratch values are arrays of ours, free to overwrite once consumed
        last = len(self.program) - 1
        for step, (kind, arg) in enumerate(self.program):
            if kind == "input":
                stack.append((inputs[arg], False))
            elif kind == "constant":
                stack.append((arg, False))
            else:
                function, arity = arg
                args = stack[-arity:]
                del stack[-arity:]
                target = out if step == last else _result_array(args, stack, out)
                function(*(value for value, _ in args), out=target)
                stack.append((target, True))
        value, _ = stack.pop()
        if value is not out:  # the whole expression is one input or one constant
            np.copyto(out, value)

    @property
    def adds_two_inputs(self) -> bool:
        """expr=add(@0,@1) (or add(@1,@0)): a sum the fusion pass (runtime/fusion.py) may hand to the
        producer of one input as an epilogue step."""
        kinds = [kind for kind, _ in self.program]
        return kinds == ["input", "input", "apply"] and {self.program[0][1], self.program[1][1]} == {0, 1} \
            and self.program[2][1] == (np.add, 2)

    # ---- OpenCL ---------------------------------------------------------------------------------------
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
        self.cl_rows = rt.is_cpu  # work-items by rows of the innermost dim (cl/expression.cl)
        rows = ["-DROWS", "-DBASES=" + "".join(f"BASE({i})" for i in self.operands)] if self.cl_rows else []
        self.cl_kernel = rt.kernel("expression.cl", "expression",
                                   [f"-DINPUTS={inputs}", f"-DEXPR={opencl_expression(self.tree)}", *rows])

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
        q.run(self.cl_kernel, size, None, out.buffer, out.size, span, ndim, dims, *pairs)


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


def _result_array(args, pending, out):
    """Where an intermediate result goes (it will be consumed later, so not into a value still pending).

    ufuncs may write over their own arguments, so first choice is an argument's scratch array of the
    result's shape; next the output array, when no pending value lives in it; else a new array.
    """
    shape = np.broadcast_shapes(*(np.shape(value) for value, _ in args))
    for value, scratch in args:
        if scratch and value.shape == shape:
            return value
    if shape == out.shape and all(value is not out for value, _ in pending):
        return out
    return np.empty(shape, out.dtype)
