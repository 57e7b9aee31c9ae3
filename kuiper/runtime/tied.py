"""Tied weights: a module operator that pnnx also hands its own weight as an input operand.

A model may use one parameter in two modules. GPT-2 and BERT tie the output projection to the token embedding
(`lm_head.weight is wte.weight`), so the trace meets the shared tensor once, as a pnnx.Attribute, and pnnx
(20261020) then passes that operand to the module operator that holds the same tensor as its own `@weight`:

    pnnx.Attribute  model.transformer.wte  0 1 1 @data=(160,32)f32
    nn.Linear       model.lm_head          2 1 1 88 89 bias=False ... @weight=(160,32)f32

nn.Linear takes one input, so the line is wrong as written: the Python script pnnx writes beside the graph calls
`self.model_lm_head(v_1, v_88)` and PyTorch refuses it. The extra operand carries nothing the operator lacks,
so build() takes it off the operator's inputs (`drop_tied_inputs`), having checked that its values are those of
one of the operator's own attributes, byte for byte; a constant left feeding nothing goes too. Any other extra
input stays, for the layer to refuse. init() still links what the file says; the graph records the operators
it untied (RuntimeGraph.untied).
"""

from __future__ import annotations

import numpy as np

from kuiper.core.operators import link_successors

ATTRIBUTE = "pnnx.Attribute"


def _same(a, b) -> bool:
    """Two attributes hold the same tensor: pnnx type, shape and every byte (NaNs included, which == is not)."""
    x, y = a.numpy(), b.numpy()
    if a.dtype != b.dtype or x.shape != y.shape or x.dtype != y.dtype:
        return False
    return x is y or np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))


def _tied(operand, own: list) -> bool:
    """The operand is a pnnx.Attribute's constant equal to one of the operator's own attributes."""
    source = operand.producer
    if source is None or source.type != ATTRIBUTE or len(source.attrs) != 1:
        return False
    (constant,) = source.attrs.values()
    return any(_same(constant, attr) for attr in own)


def drop_tied_inputs(operators: list) -> tuple:
    """(the operators, without the constants that only fed tied inputs; the names of the operators that lost an
    input). Every input of an operator with attributes that repeats one of them is taken off its inputs, the
    operands' consumers and the successors updated."""
    untied, dropped = [], []
    for op in operators:
        if not op.attrs or op.type == ATTRIBUTE:
            continue
        own = list(op.attrs.values())
        tied = [i for i, operand in enumerate(op.input_operands) if _tied(operand, own)]
        if not tied:
            continue
        for i in tied:
            op.input_operands[i].consumers.remove(op)
            dropped.append(op.input_operands[i])
        op.input_operands = [o for i, o in enumerate(op.input_operands) if i not in tied]
        op.input_names = [name for i, name in enumerate(op.input_names) if i not in tied]
        untied.append(op.name)
    unread = {operand.producer.name for operand in dropped if not operand.consumers}  # a constant's one output
    kept = [op for op in operators if op.name not in unread]
    if untied:
        link_successors(kept)
    return kept, untied
