"""The sibling-projections pass: Linears that read one input become one Linear and a split of its output.

A transformer's attention projects the same normalized input three times, q, k and v, each an nn.Linear whose
output is then cut into heads by a reshape and a permute. One product with the three weight matrices side by
side reads the input once and launches one GEMM where there were three; a split of its output along the last
dim gives each projection back, and the heads pass (runtime/heads.py), which runs next, makes the split and
the cuts into heads after it one operator.

Over the operators in execution order: two or more nn.Linears (or kuiper.Int8Linears, of one group size) that
read the same operand, with the same in_features and the same layer class, all with a bias or none, whose
outputs are each read by one operator that only moves elements (a reshape, permute or transpose) and are no
graph outputs, become one layer of that class (the first one's `joined`: the weights and biases joined in the
layers' order) and a split whose pieces are their outputs. The joined layer keeps the first one's name, names
the types it does and lists the layers in `absorbed`; the split is named `<that name>.split`.
"""

from __future__ import annotations

from kuiper.core.operators import RuntimeOperand, RuntimeOperator, rewritten
from kuiper.layers.base import Layer
from kuiper.layers.int8_linear import Int8Linear
from kuiper.layers.linear import Linear
from kuiper.layers.permute import Permute
from kuiper.layers.reshape import ViewLayer
from kuiper.layers.split import SplitLayer
from kuiper.layers.transpose import Transpose


#: the layers joined: each makes one layer of several of its kind side by side (`joined`)
JOINABLE = (Linear, Int8Linear)


class Pieces(SplitLayer):
    """The joined Linear's output cut back into the projections, along the last dim."""

    num_inputs = 1

    def __init__(self, op, widths: list):
        Layer.__init__(self, op)
        self.dim, self.widths = -1, widths

    def sizes(self, length: int):
        return self.widths


def join(order: list, graph_ends: set) -> list:
    """Rewrite `order` (operators in execution order, linked) as described above; returns the new operator list."""
    replaced, absorbed = {}, set()
    for operand in {id(o): o for op in order for o in op.input_operands}.values():
        group = [op for op in dict.fromkeys(operand.consumers) if _joinable(op, operand, graph_ends)]
        group = [op for op in group if _twins(op, group[0])]
        if len(group) < 2:
            continue
        replaced[group[0].name] = _operators(group, operand)
        absorbed.update(op.name for op in group[1:])
    return rewritten(order, replaced, absorbed)


def _joinable(op, operand, graph_ends: set) -> bool:
    """A Linear or Int8Linear on `operand` whose output one mover reads, and no graph output."""
    if not isinstance(op.layer, JOINABLE) or op.input_operands != [operand]:
        return False
    out = op.output_operand
    return (out.name not in graph_ends and len(out.consumers) == 1
            and isinstance(out.consumers[0].layer, (ViewLayer, Permute, Transpose)))


def _twins(op, first) -> bool:
    a, b = op.layer, first.layer
    return (type(a) is type(b) and a.in_features == b.in_features and (a.bias is None) == (b.bias is None)
            and getattr(a, "group_size", None) == getattr(b, "group_size", None))


def _operators(group: list, source) -> list:
    """The joined Linear and its split, in place of `group`'s Linears."""
    first = group[0]
    joined = RuntimeOperator("+".join(op.type for op in group), first.name, line=first.line)
    layers = [op.layer for op in group]
    layer = layers[0].joined(layers, joined)
    shape = first.output_operand.shape
    whole = RuntimeOperand(f"{first.name}.joined", None if shape is None else (*shape[:-1], layer.out_features),
                           first.output_operand.dtype)
    whole.producer = joined
    joined.input_operands, joined.input_names, joined.output_operands = [source], first.input_names[:1], [whole]
    joined.layer, joined.absorbed = layer, group
    split = RuntimeOperator("torch.split", f"{first.name}.split", line=first.line)
    split.input_operands, split.input_names = [whole], [""]
    split.output_operands = [op.output_operand for op in group]
    for out in split.output_operands:
        out.producer = split
    split.layer = Pieces(split, [lin.out_features for lin in layers])
    whole.consumers = [split]
    source.consumers = [c for c in source.consumers if c not in group] + [joined]
    return [joined, split]
