"""The gated-MLP pass: `silu(gate_proj(x)) * up_proj(x)`, four operators of a Llama block, becomes one.

The two projections read the same input and have the same shape; run as written, each is a product of its
own, and the SiLU and the product two more passes over their outputs. One product with both weight matrices
side by side reads the input once and does the same multiply-adds in one call of twice the width, and the
gate's SiLU and the product can run as it stores the result (kuiper/layers/gated.py, kuiper/opencl/gated.py).

Over the operators in execution order: a pnnx.Expression mul(@0,@1) whose one input is the SiLU (F.silu,
nn.SiLU) of an nn.Linear's output and whose other input is another nn.Linear's output is rewritten when the two
Linears read the same operand, have the same in and out features, both have a bias or neither, and every tensor
between them and the product is read by the next of these operators alone and is no graph input or output. The
new operator keeps the gate's name, names the four types it does, and lists them in `absorbed`, as the copies
and fusion passes do. Its layer is the backend's GatedLinear. The pass runs before the copies and fusion passes.
"""

from __future__ import annotations

from kuiper.core.operators import RuntimeOperator, rewritten
from kuiper.layers.expression import Expression
from kuiper.layers.gated import GatedLinear
from kuiper.layers.linear import Linear
from kuiper.layers.silu import SiLU


def join(order: list, graph_ends: set, gated_class=GatedLinear) -> list:
    """Rewrite `order` (operators in execution order, linked) as described above; returns the new operator list."""
    replaced, absorbed = {}, set()
    for op in order:
        found = _gated(op, graph_ends)
        if found is not None:
            replaced[op.name] = [_operator(*found, op, gated_class)]
            absorbed.update(o.name for o in found)
    return rewritten(order, replaced, absorbed)


def _gated(mul, graph_ends: set):
    """(gate, up, act): the operators whose outputs `mul` multiplies as described above, or None."""
    if not isinstance(mul.layer, Expression) or not mul.layer.multiplies_two_inputs:
        return None
    first, second = mul.input_operands
    for activated, up_out in ((first, second), (second, first)):
        act, up = activated.producer, up_out.producer
        if act is None or up is None or not isinstance(act.layer, SiLU):
            continue
        gate_out = act.input_operands[0]
        gate = gate_out.producer
        if gate is None or not _twins(gate, up):
            continue
        ends = {o.name for o in (gate_out, activated, up_out)} & graph_ends
        if not ends and gate_out.consumers == [act] and activated.consumers == [mul] and up_out.consumers == [mul]:
            return gate, up, act
    return None


def _twins(gate, up) -> bool:
    """Two plain Linears on one operand with the same shape, both with a bias or neither."""
    a, b = gate.layer, up.layer
    return (gate is not up and type(a) is type(b) and isinstance(a, Linear)
            and gate.input_operands[0] is up.input_operands[0]
            and (a.in_features, a.out_features) == (b.in_features, b.out_features)
            and (a.bias is None) == (b.bias is None))


def _operator(gate, up, act, mul, gated_class) -> RuntimeOperator:
    """The operator that does the four: the projections' input in, the product out."""
    op = RuntimeOperator("+".join(o.type for o in (gate, up, act, mul)), gate.name, line=gate.line)
    source = gate.input_operands[0]
    op.input_operands, op.input_names = [source], gate.input_names[:1]
    op.output_operands = [mul.output_operand]
    op.output_operand.producer = op
    op.layer = gated_class(op, gate.layer, up.layer, act.layer)
    op.absorbed = [gate, up, act, mul]
    source.consumers = [c for c in source.consumers if c is not gate and c is not up] + [op]
    return op
