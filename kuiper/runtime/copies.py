"""The copies pass: a chain of operators that only move elements becomes one operator doing one strided copy.

Permute, transpose, a reshape (any ViewLayer) and a piece of a split or chunk each copy their input in
another order. In a transformer they come in runs: Swin cuts every map into windows with `reshape -> permute
-> reshape`, MaxViT turns its windows into a grid with `reshape -> permute -> reshape -> permute -> reshape ->
transpose`, and cuts q, k and v from one tensor with a chunk whose every piece goes through `reshape ->
permute`. Run as written, each operator reads and writes the whole tensor; the chain as a whole is still one
reordering of its input, which one copy can do (kuiper/layers/copy_chain.py; where no one walk does it, a few).

Over the operators in execution order: a chain starts at a moving operator and takes the next one while the
tensor between them has that one as its only reader and is not a graph input or output. A split or chunk
starts one chain per piece and the operator goes: its input is read once per piece. A chain is rewritten when
it has two operators or more and one of them copies (a chain of reshapes alone is left to the fusion pass,
which makes such reshapes views of their input's buffer). The new operator keeps the first one's name (a
piece of a split adds `[i]`), names every type it does, and lists the file's operators in `absorbed`, as the
fusion pass does.
"""

from __future__ import annotations

from kuiper.layers.copy_chain import CopyChain
from kuiper.layers.permute import Permute
from kuiper.layers.reshape import ViewLayer
from kuiper.layers.split import SplitLayer
from kuiper.layers.transpose import Transpose
from kuiper.core.operators import RuntimeOperator, rewritten

MOVERS = (Permute, Transpose, ViewLayer, SplitLayer)


def compose(order: list, graph_ends: set, chain_class=CopyChain) -> list:
    """Rewrite `order` (operators in execution order, linked) as described above; returns the new operator list.
    `graph_ends` are the names of the graph's input and output operands; `chain_class` is the backend's
    CopyChain."""
    absorbed = set()
    replaced = {}  # name of an operator that starts chains -> the operators that stand for them
    for op in order:
        if op.name in absorbed or not _moves(op):
            continue
        chains = [_chain(op, output, graph_ends) for output in range(len(op.output_operands))]
        if not any(len(chain) > 1 and not all(isinstance(o.layer, ViewLayer) for o, _ in chain) for chain in chains):
            continue
        split = len(chains) > 1 or isinstance(op.layer, SplitLayer)
        replaced[op.name] = [_operator(chain, f"{op.name}[{i}]" if split else op.name, chain_class)
                            for i, chain in enumerate(chains)]
        absorbed.update(o.name for chain in chains for o, _ in chain[1:])
        source = op.input_operands[0]
        source.consumers = [c for c in source.consumers if c is not op] + replaced[op.name]
    return rewritten(order, replaced, absorbed)


def _moves(op) -> bool:
    return op.layer is not None and isinstance(op.layer, MOVERS) and len(op.input_operands) == 1


def _chain(op, output: int, graph_ends: set) -> list:
    """[(operator, output index)] from `op`'s output `output` on, as far as the rule of the module goes."""
    chain = [(op, output)]
    while True:
        last, index = chain[-1]
        operand = last.output_operands[index]
        if operand.name in graph_ends or len(operand.consumers) != 1:
            return chain
        reader = operand.consumers[0]
        if not _moves(reader) or len(reader.output_operands) != 1:
            return chain
        chain.append((reader, 0))


def _operator(chain: list, name: str, chain_class) -> RuntimeOperator:
    """The operator that does `chain`: its first operator's input in, its last output out."""
    first = chain[0][0]
    op = RuntimeOperator("+".join(o.type for o, _ in chain), name, line=first.line)
    op.input_operands = [first.input_operands[0]]
    op.input_names = first.input_names[:1]
    last, index = chain[-1]
    op.output_operands = [last.output_operands[index]]
    op.output_operand.producer = op
    op.layer = chain_class(op, [(o.layer, i) for o, i in chain])
    op.absorbed = [o for o, _ in chain]
    return op
