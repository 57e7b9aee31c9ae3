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

On OpenCL the tree is compiled to one OpenCL C expression instead (kuiper/opencl/expression.py).
"""

from __future__ import annotations

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.elementwise import erf
from kuiper.layers.expression_parser import Apply, ExpressionSyntaxError, Literal, Operand, parse, to_rpn
from kuiper.layers.registry import register


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
        return self._joins_two_inputs(np.add)

    @property
    def multiplies_two_inputs(self) -> bool:
        """expr=mul(@0,@1) (or mul(@1,@0)): the product of a gated MLP (runtime/gated.py)."""
        return self._joins_two_inputs(np.multiply)

    def _joins_two_inputs(self, ufunc) -> bool:
        kinds = [kind for kind, _ in self.program]
        return kinds == ["input", "input", "apply"] and {self.program[0][1], self.program[1][1]} == {0, 1} \
            and self.program[2][1] == (ufunc, 2)


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
