"""Runtime records: the graph's operators, operands, parameters and attributes.

The PNNX reader gives plain records; RuntimeGraph.init() turns them into these objects, which link to each
other (an operator knows its input operands, output operands and successor operators) and carry the state
that forward needs (the tensor an operand holds now, the operator's layer and meet_num counter).
"""

from __future__ import annotations

import numpy as np


INPUT, OUTPUT, TUPLE = "pnnx.Input", "pnnx.Output", "prim::TupleConstruct"
#: operators the graph itself handles: they move tensors around but compute nothing
STRUCTURAL = frozenset({INPUT, OUTPUT, TUPLE})

class RuntimeParameter:
    """A typed parameter value (`type` is the pnnx type code 0-7, 10, 11)."""

    __slots__ = ("type", "value")

    def __init__(self, type: int, value):
        self.type = type
        self.value = value

    @classmethod
    def from_value(cls, value) -> "RuntimeParameter":
        """Type a plain Python value the way pnnx would (used when operators are made by hand)."""
        if value is None:
            return cls(0, None)
        if isinstance(value, bool):
            return cls(1, value)
        if isinstance(value, int):
            return cls(2, value)
        if isinstance(value, float):
            return cls(3, value)
        if isinstance(value, str):
            return cls(4, value)
        items = list(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return cls(5, items)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return cls(6, [float(v) for v in items])
        return cls(7, [str(v) for v in items])

    def __repr__(self):
        return f"RuntimeParameter({self.value!r})"


class RuntimeAttribute:
    """A weight: a (usually zero-copy) array from the .bin file, with the pnnx dtype it was stored in."""

    __slots__ = ("name", "dtype", "shape", "_source")

    def __init__(self, name: str, dtype: str, shape: tuple, source):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self._source = source  # a pnnx Attribute record, or an ndarray for hand-made operators

    def numpy(self) -> np.ndarray:
        src = self._source
        return src if isinstance(src, np.ndarray) else src.numpy()

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.numpy().itemsize

    def __repr__(self):
        return f"RuntimeAttribute({self.name}, {self.shape}, {self.dtype})"


class RuntimeOperand:
    """A value between operators: its recorded shape/dtype, producer, consumers, and current tensor."""

    __slots__ = ("name", "shape", "dtype", "producer", "consumers", "tensor", "overwrites")

    def __init__(self, name: str, shape=None, dtype: str | None = None):
        self.name = name
        self.shape = None if shape is None else tuple(shape)
        self.dtype = dtype
        self.producer = None  # RuntimeOperator
        self.consumers = []   # RuntimeOperators, one entry per use
        self.tensor = None    # what forward handed over (by reference)
        # the operand whose buffer this one takes over: its producer works in place (set by runtime/fusion.py)
        self.overwrites = None

    def __repr__(self):
        return f"RuntimeOperand({self.name}, {self.shape})"


class RuntimeOperator:
    """One operator of the graph, linked to its operands and successors, with its layer and meet_num."""

    def __init__(self, type: str, name: str, params=None, attrs=None, line: int = 0):
        self.type = type
        self.name = name
        self.line = line
        self.params = dict(params or {})  # key -> RuntimeParameter
        self.attrs = dict(attrs or {})    # key -> RuntimeAttribute
        self.input_operands = []          # RuntimeOperand, in slot order
        self.input_names = []             # the `$key` of each input slot ('' when none)
        self.output_operands = []         # RuntimeOperand, usually one
        self.successors = []              # RuntimeOperator, unique, in order of first use
        self.layer = None
        self.meet_num = 0
        self.absorbed = []                # a fused operator: the file's operators it does (runtime/fusion.py)

    @property
    def output_operand(self) -> RuntimeOperand:
        return self.output_operands[0]

    def slots_fed_by(self, producer: "RuntimeOperator") -> int:
        """How many of this operator's input slots `producer` fills: what meet_num counts up to."""
        return sum(operand.producer is producer for operand in self.input_operands)

    def __repr__(self):
        return f"RuntimeOperator({self.type} {self.name})"


def make_operator(type: str, name: str = "op", params: dict | None = None, attrs: dict | None = None,
                  input_shapes=((1,),), num_outputs: int = 1) -> RuntimeOperator:
    """Build a free-standing operator from plain values: how tests and lessons make a single layer.

    `params` maps keys to plain Python values, `attrs` maps keys to numpy arrays, `input_shapes` gives the
    recorded shape of each input operand.
    """
    op = RuntimeOperator(
        type, name,
        params={k: RuntimeParameter.from_value(v) for k, v in (params or {}).items()},
        attrs={k: RuntimeAttribute(k, "f32", np.shape(v), np.asarray(v)) for k, v in (attrs or {}).items()},
    )
    for i, shape in enumerate(input_shapes):
        operand = RuntimeOperand(f"{name}.in{i}", shape)
        operand.consumers.append(op)
        op.input_operands.append(operand)
        op.input_names.append("")
    for i in range(num_outputs):
        operand = RuntimeOperand(f"{name}.out{i}")
        operand.producer = op
        op.output_operands.append(operand)
    return op


def link_successors(operators: list) -> None:
    """Set each operator's successors from its outputs' consumers (after a pass has rewritten the list)."""
    for op in operators:
        successors = []
        for operand in op.output_operands:
            for consumer in operand.consumers:  # one entry per slot: pow(@0, 3) * @0 reads an operand twice
                if consumer not in successors:
                    successors.append(consumer)
        op.successors = successors


def rewritten(order: list, replaced: dict, absorbed: set) -> list:
    """A pass's new operator list, linked: `order` without the operators named in `absorbed`, each named in
    `replaced` giving way to the list of operators that stand for it there."""
    result = []
    for op in order:
        if op.name not in absorbed:
            result.extend(replaced.get(op.name, [op]))
    link_successors(result)
    return result
