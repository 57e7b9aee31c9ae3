"""Choosing by a condition: torch.where and Tensor.masked_fill, the two ways a text model turns a mask into the
bias its attention adds (0 where a token may be seen, a huge negative number where it may not).

    torch.where(condition, input, other)   input where condition is True, other elsewhere
    x.masked_fill(mask, value)             value where mask is True, x elsewhere

torch.where broadcasts its three arguments together, e.g. a (b, 1, n, n) condition with a 0-d zero and a number:
transformers' eager_mask builds its bias as `torch.where(keep, torch.zeros(()), torch.finfo(dtype).min)`.
masked_fill keeps x's shape and dtype; its mask must broadcast to x.

What pnnx writes: the condition (`$condition`) and mask (`$mask`) are always operands; torch.where's input and
other, and masked_fill's value, are each an operand (`$input`, `$other`, `$value`) or, when the model gave a
number, a parameter (`other=-3.40282347e38`, `value=-inf`).

The result's dtype follows PyTorch's promotion: the widest kind among the tensors (bool < integer < float), a
number counting only when its kind is wider (a float number with integer tensors gives float32); kuiper's floats
are float32. On the OpenCL backend both layers run on the host: they meet a mask once per forward, as the casts
before them do.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


def _rank(kind: str) -> int:
    """Where a dtype kind stands in promotion: bool, then the integers, then the floats."""
    return {"b": 0, "i": 1, "u": 1, "f": 2}[kind]


def promote(dtypes: list, numbers: list) -> np.dtype:
    """PyTorch's result dtype for tensors of `dtypes` and Python `numbers` (in kuiper's float32)."""
    tensor_rank = max((_rank(np.dtype(d).kind) for d in dtypes), default=-1)
    number_kinds = ["b" if isinstance(v, bool) else "i" if isinstance(v, int) else "f" for v in numbers]
    number_rank = max((_rank(k) for k in number_kinds), default=-1)
    if number_rank > tensor_rank:
        return np.dtype([np.bool_, np.int64, np.float32][number_rank])
    if tensor_rank == 2:
        return np.dtype(np.float32)
    return np.result_type(*[d for d in dtypes if _rank(np.dtype(d).kind) == tensor_rank])


class Choose(Layer):
    """Arguments that are an operand or a number: `slots` names them in order, the operands bound by their `$`
    names (or, where pnnx wrote none, in slot order), the numbers read from the parameters of the same names."""

    num_inputs = None
    slots: tuple = ()
    #: the slots that must be operands
    operands_only: tuple = ()

    def __init__(self, op):
        super().__init__(op)
        self.numbers = {}
        for slot in self.slots:
            if slot not in self.operands_only and slot in op.params:
                self.numbers[slot] = self.number(slot)
        wanted = [s for s in self.slots if s not in self.numbers]
        names = list(op.input_names) or [""] * len(op.input_operands)
        if len(names) != len(wanted):
            raise self.error(f"expects {len(wanted)} input(s) ({', '.join(wanted)}), the graph gives {len(names)}")
        if all(names):
            if sorted(names) != sorted(wanted):
                raise self.error(f"expects inputs {', '.join(wanted)}, the graph names {', '.join(names)}")
            self.positions = {slot: names.index(slot) for slot in wanted}
        else:
            self.positions = {slot: i for i, slot in enumerate(wanted)}

    def number(self, key: str):
        """A parameter as the Python number it stands for: bool and int kept, anything else a float (inf too)."""
        value = self.param(key)
        if isinstance(value, (bool, int)):
            return value
        return self.float_param(key, finite=False)

    def args(self, values: list) -> dict:
        """{slot: array or number} from the layer's inputs (shapes or dtypes work as well as arrays)."""
        return {slot: self.numbers[slot] if slot in self.numbers else values[self.positions[slot]]
                for slot in self.slots}

    def broadcast(self, shapes: list) -> tuple:
        try:
            return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
        except ValueError:
            raise self.shape_error(f"cannot broadcast the shapes {', '.join(map(str, shapes))} together") from None


@register("torch.where")
class Where(Choose):
    slots = ("condition", "input", "other")
    operands_only = ("condition",)

    def output_shapes(self, input_shapes):
        return [self.broadcast(input_shapes)]

    def output_dtypes(self, input_dtypes):
        args = self.args(input_dtypes)
        tensors = [args[s] for s in ("input", "other") if s not in self.numbers]
        return [promote(tensors, [self.numbers[s] for s in ("input", "other") if s in self.numbers])]

    def forward_numpy(self, inputs, outputs):
        args, out = self.args(inputs), outputs[0]
        np.copyto(out, args["other"], casting="unsafe")
        np.copyto(out, args["input"], casting="unsafe", where=args["condition"].astype(bool, copy=False))


@register("Tensor.masked_fill")
class MaskedFill(Choose):
    slots = ("input", "mask", "value")
    operands_only = ("input", "mask")

    def output_shapes(self, input_shapes):
        args = self.args(input_shapes)
        shape, mask = tuple(args["input"]), tuple(args["mask"])
        if len(mask) > len(shape) or any(m not in (1, n) for m, n in zip(mask[::-1], shape[::-1])):
            raise self.shape_error(f"the mask {mask} does not broadcast to the input {shape}")
        # one element: PyTorch's 0-d tensor, which numpy gives a dim when it makes an array contiguous
        if "value" not in self.numbers and math.prod(args["value"]) != 1:
            raise self.shape_error(f"the value must be a number or a 0-d tensor, got shape {tuple(args['value'])}")
        return [shape]

    def output_dtypes(self, input_dtypes):
        return [np.dtype(self.args(input_dtypes)["input"])]

    def forward_numpy(self, inputs, outputs):
        args, out = self.args(inputs), outputs[0]
        np.copyto(out, args["input"])
        # the value in the input's dtype, as PyTorch casts it
        value = np.asarray(args["value"]).reshape(()).astype(out.dtype)
        np.copyto(out, value, where=args["mask"].astype(bool, copy=False))
