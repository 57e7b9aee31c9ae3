"""The cat-chains pass: a concatenation that repeats an earlier one's inputs reads that one's output instead.

A DenseNet layer concatenates every feature map of its block so far: layer k joins the block's input and the
k - 1 maps of the layers before it, exactly the pieces layer k - 1 joined, plus that layer's own map. Written
so, a block of n layers copies on the order of n^2 / 2 pieces (DenseNet-121's 58 cats join 539), and on OpenCL
each piece is a launch of its own. The pieces layer k - 1 joined already lie side by side in its output, so layer k can join that output
and the new map: the same bytes moved, in two pieces a layer.

Over the operators in execution order: a torch.cat whose first inputs are all the inputs of an earlier torch.cat
along the same dim (two or more, the same operands in the same order) reads that cat's output in their place;
the longest such cat is taken. The earlier output then has one more reader, and so lives until this cat has
run. It runs before the fusion pass, which lets an operator work in place on an input only when nothing else
reads it.
"""

from __future__ import annotations

from kuiper.core.operators import link_successors
from kuiper.layers.cat import Cat


def chain(order: list) -> list:
    """Rewrite the inputs of `order`'s cats (operators in execution order, linked) as above; returns `order`."""
    joined = []  # (an earlier cat, the operands it joins as the file has them)
    for op in order:
        if not isinstance(op.layer, Cat):
            continue
        inputs = op.input_operands
        earlier, pieces = max(((c, p) for c, p in joined if _leads(c, p, op)), key=lambda cp: len(cp[1]),
                              default=(None, ()))
        joined.append((op, inputs))
        if earlier is None:
            continue
        for operand in inputs[:len(pieces)]:
            operand.consumers.remove(op)  # one entry per slot, as the file lists them
        earlier.output_operand.consumers.append(op)
        op.input_operands = [earlier.output_operand, *inputs[len(pieces):]]
        op.input_names = ["", *op.input_names[len(pieces):]]
    link_successors(order)
    return order


def _leads(earlier, pieces: list, op) -> bool:
    """Whether `earlier`, which joins `pieces`, joins along `op`'s dim the operands `op` starts with, and fewer."""
    inputs = op.input_operands
    return (earlier.layer.dim == op.layer.dim and 2 <= len(pieces) < len(inputs)
            and all(a is b for a, b in zip(pieces, inputs)))
