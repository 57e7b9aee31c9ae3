"""The graph's checks: of the file's structure at init, of inferred shapes when a plan is made, and of the
arrays given to forward. Each failure is one kuiper error naming the file and line, or the graph input."""

from __future__ import annotations

import warnings

import numpy as np

from kuiper.core.errors import GraphError, InputError, KuiperWarning, ShapeError
from kuiper.core.operators import INPUT, OUTPUT, TUPLE
from kuiper.core.tensor import Tensor
from kuiper.pnnx.dtypes import numpy_dtype


def fmt(shape) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


# ---- structure, at init ---------------------------------------------------------------------------------
def structure(operators: list, path: str) -> None:
    """What pnnx's writer guarantees and the graph relies on: a pnnx.Input reads nothing and makes one
    operand, a pnnx.Output reads operands and makes none, only pnnx.Output and other tuples read a
    prim::TupleConstruct's tuple (they unpack it), and some pnnx.Output says what forward returns."""
    for op in operators:
        where = f"{path}:{op.line}: {op.type} operator '{op.name}'"
        ins, outs = len(op.input_operands), len(op.output_operands)
        if op.type == INPUT and (ins, outs) != (0, 1):
            raise GraphError(f"{where} has {ins} input(s) and {outs} output(s); a graph input has 0 and 1")
        if op.type == OUTPUT and (ins == 0 or outs):
            raise GraphError(f"{where} has {ins} input(s) and {outs} output(s); a graph output reads at least "
                             f"one operand and makes none, so no operator can read after it")
        if op.type == TUPLE:
            if ins == 0 or outs != 1:
                raise GraphError(f"{where} has {ins} input(s) and {outs} output(s); a tuple bundles at least "
                                 f"one operand into one")
            reader = next((c for c in op.output_operand.consumers if c.type not in (OUTPUT, TUPLE)), None)
            if reader is not None:
                raise GraphError(f"{where} is read by {reader.type} operator '{reader.name}' (line "
                                 f"{reader.line}); only pnnx.Output unpacks a tuple")
    if not any(op.type == OUTPUT for op in operators):
        last = f"{operators[-1].line}" if operators else "2"
        raise GraphError(f"{path}:{last}: the graph has no pnnx.Output, so forward would return nothing")


def unpack(operands: list) -> list:
    """The operands with every tuple replaced by its parts, in order, however deeply tuples nest."""
    flat, pending = [], list(reversed(operands))
    while pending:
        operand = pending.pop()
        if operand.producer is not None and operand.producer.type == TUPLE:
            pending += reversed(operand.producer.input_operands)
        else:
            flat.append(operand)
    return flat


# ---- shapes, when a plan is made ----------------------------------------------------------------------
def positive_shape(path: str, op, operand, shape) -> tuple:
    """`shape` as a tuple of ints, refused when a dim is not positive: kuiper's layers run no empty tensors
    (a batch of 0 included), and a corrupt parameter can make a layer infer a negative size."""
    shape = tuple(shape)
    if not all(isinstance(d, (int, np.integer)) and d >= 1 for d in shape):
        raise ShapeError(f"{path}:{op.line}: {op.type} operator '{op.name}' makes operand {operand.name} of shape "
                         f"{fmt(shape)}; every dim must be at least 1")
    return tuple(int(d) for d in shape)


def recorded_shapes(plan, operands: dict, path: str) -> None:
    """At the recorded input shapes, every inferred shape must equal the `#` shape in the file."""
    for name, shape in plan.shapes.items():
        recorded = operands[name].shape
        if recorded is None or not all(isinstance(d, int) for d in recorded):
            continue
        if tuple(recorded) != shape:
            producer = operands[name].producer
            raise ShapeError(f"{path}:{producer.line}: {producer.type} operator '{producer.name}' infers shape "
                             f"{shape} for operand {name}, the file records {tuple(recorded)}")


# ---- the arrays given to forward ------------------------------------------------------------------------
def _where(op) -> str:
    return f"graph input '{op.name}' (operand {op.output_operand.name})"


def input_count(input_operators: list, given: int, caller: str, path: str) -> None:
    if given != len(input_operators):
        raise InputError(f"{path}: the graph takes {len(input_operators)} input(s), {caller} was given {given}")


def input_ranks(input_operators: list, signature: list) -> None:
    for op, (shape, _) in zip(input_operators, signature):
        expected = op.output_operand.shape
        if expected is not None and len(expected) != len(shape):
            raise InputError(f"{_where(op)}: expected shape {fmt(expected)}, given {fmt(shape)} (wrong rank)")


def input_dtype(op) -> np.dtype:
    """The dtype forward runs a graph input in: an integer input (token ids, positions: `#0=(1,?)i64`) in the
    integer type the file records, any other in float32."""
    recorded = numpy_dtype(op.output_operand.dtype)
    return recorded if recorded.kind in "iu" else np.dtype(np.float32)


def input_arrays(input_operators: list, inputs: tuple) -> list:
    """The arrays as forward runs them, C-contiguous: float32 for float inputs (float64 and float16 converted,
    with a warning), the recorded integer type for integer ones (other integer types converted)."""
    arrays = []
    for op, x in zip(input_operators, inputs):
        if isinstance(x, Tensor):
            x = x.data
        if not isinstance(x, np.ndarray):
            raise InputError(f"{_where(op)}: expected a numpy array, got {type(x).__name__}")
        expected = input_dtype(op)
        if expected.kind in "iu":
            if x.dtype.kind not in "iu":
                raise InputError(f"{_where(op)}: expected integer data ({expected}), got {x.dtype}")
            x = x.astype(expected, copy=False)
        elif x.dtype != np.float32:
            if x.dtype not in (np.float64, np.float16):
                raise InputError(f"{_where(op)}: expected float32 data, got {x.dtype}")
            warnings.warn(f"{_where(op)}: {x.dtype} input converted to float32", KuiperWarning, stacklevel=4)
            x = x.astype(np.float32)
        if not x.flags.c_contiguous:
            raise InputError(f"{_where(op)}: the array is not C-contiguous (use np.ascontiguousarray)")
        arrays.append(x)
    return arrays


def fitting(input_operators: list, signature: list, plan):
    """plan() for these inputs, a ShapeError on the way reported as the inputs' error."""
    try:
        return plan()
    except ShapeError as e:
        described = "; ".join(f"'{op.name}' expected {fmt(op.output_operand.shape)}, given {fmt(shape)}"
                              for op, (shape, _) in zip(input_operators, signature))
        raise InputError(f"graph input shapes do not fit ({described}): {e}") from None
