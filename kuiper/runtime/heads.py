"""The heads pass: a split whose pieces are each cut into heads, and some of them rotated, becomes one operator;
an attention whose heads are joined again after it writes them joined.

An attention block's q, k and v, once the sibling-projections pass (runtime/siblings.py) has made them one
product, come back out of it through a split, a reshape and a permute each, and q and k then through a
RotaryEmbedding: five operators between the product and the attention, each a pass over the numbers and a
launch on OpenCL. kuiper/layers/heads.py's SplitHeads does what they do in one.

Over the operators in execution order: a split of a (B, S, W) tensor along its last dim is rewritten when every
piece is read by one reshape to (B, -1, n, D) (B the recorded batch or -1; one D for all pieces), that reshape
by one permute (0, 2, 1, 3), and none of the tensors between them is a graph input or output. Between the
reshape and the permute an RMSNorm over D alone may normalize each head (Qwen3's q_norm and k_norm; every such
norm of the split with one eps, and D / 2 a power of two, which OpenCL's kernel sums over in a work-group). A
permute whose
output one RotaryEmbedding reads (as its x) takes that rotary in too, provided every rotary taken reads the same
positions, made before the split, with the same frequencies. The new operator keeps the split's name, names the
types it does and lists them in `absorbed`, as the other passes do. It runs after the sibling-projections pass
and before the copies pass, which would otherwise fold each piece into its reshape and permute alone.

After the attention the block joins the heads again: a permute (0, 2, 1, 3) back to (B, S, n, D), a reshape to
(B, S, n * D) for the output projection. A kuiper.CachedAttention whose output one such permute reads, and that
permute's output one such reshape, neither output a graph output, writes that layout itself (`heads_last`,
kuiper/layers/cached_attention.py): one pass over its output and one launch fewer. Its operator keeps the
attention's name and layer and names the three types.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kuiper.core.operators import RuntimeOperator, rewritten
from kuiper.layers.cached_attention import CachedAttention
from kuiper.layers.heads import SplitHeads
from kuiper.layers.permute import Permute
from kuiper.layers.reshape import Reshape
from kuiper.layers.rms_norm import RMSNorm
from kuiper.layers.rotary import RotaryEmbedding
from kuiper.layers.split import SplitLayer


class Cut(NamedTuple):
    """How one piece of the split goes: its reshape, the RMSNorm of its heads or None, its permute, its rotary or
    None, and its heads."""
    reshape: RuntimeOperator
    norm: RuntimeOperator | None
    permute: RuntimeOperator
    rotary: RuntimeOperator | None
    heads: int

    @property
    def operators(self) -> list:
        return [o for o in (self.reshape, self.norm, self.permute, self.rotary) if o is not None]


def join(order: list, graph_ends: set, heads_class=SplitHeads) -> list:
    """Rewrite `order` (operators in execution order, linked) as described above; returns the new operator list.
    `heads_class` is the backend's SplitHeads."""
    replaced, absorbed = {}, set()
    index = {id(op): i for i, op in enumerate(order)}
    for op in order:
        joined = _joined_heads(op, graph_ends)
        if joined is not None:
            replaced[op.name] = [_heads_last(op, *joined)]
            absorbed.update(o.name for o in joined)
            continue
        found = _cuts(op, graph_ends)
        if found is None:
            continue
        positions = {id(c.rotary.input_operands[1]): c.rotary.input_operands[1] for c in found if c.rotary}
        if len(positions) > 1 or any(index.get(id(p.producer), -1) > index[id(op)] for p in positions.values()):
            continue
        replaced[op.name] = [_operator(op, found, [*positions.values()], heads_class)]
        absorbed.update(o.name for cut in found for o in cut.operators)
    return rewritten(order, replaced, absorbed)


def _cuts(split, graph_ends: set):
    """[Cut] for each piece of `split`, as described above, or None."""
    layer = split.layer
    if not isinstance(layer, SplitLayer) or len(split.input_operands) != 1:
        return None
    shape = split.input_operands[0].shape
    if shape is None or len(shape) != 3 or layer.dim % 3 != 2 or not isinstance(shape[2], int):
        return None
    found = [_cut(piece, shape[0], graph_ends) for piece in split.output_operands]
    if any(c is None for c in found) or len({dim for _, dim in found}) != 1:
        return None
    cuts = [cut for cut, _ in found]
    if list(layer.sizes(shape[2])) != [cut.heads * dim for cut, dim in found]:
        return None
    rotaries = [c.rotary for c in cuts if c.rotary is not None]
    if any(not np.array_equal(r.layer.inv_freq, rotaries[0].layer.inv_freq) for r in rotaries):
        return None
    if len({c.norm.layer.eps for c in cuts if c.norm is not None}) > 1:
        return None
    return cuts


def _cut(piece, recorded, graph_ends: set):
    """(Cut, head_dim) where `piece`, of a tensor of `recorded` batch, goes as described above, or None."""
    reshape = _only_reader(piece, graph_ends)
    if reshape is None or not isinstance(reshape.layer, Reshape) or len(reshape.layer.shape) != 4:
        return None
    batch, rows, heads, dim = reshape.layer.shape
    if rows != -1 or heads < 1 or dim < 2 or dim % 2 or batch not in (-1, recorded):
        return None
    norm = permute = _only_reader(reshape.output_operand, graph_ends)
    if norm is not None and _head_norm(norm.layer, dim):
        permute = _only_reader(norm.output_operand, graph_ends)
    else:
        norm = None
    if permute is None or not isinstance(permute.layer, Permute) or permute.layer.axes != (0, 2, 1, 3):
        return None
    out = permute.output_operand
    rotary = out.consumers[0] if len(out.consumers) == 1 and out.name not in graph_ends else None
    if rotary is not None and not (isinstance(rotary.layer, RotaryEmbedding) and rotary.input_operands[0] is out
                                   and rotary.input_operands[1] is not out and rotary.layer.head_dim == dim):
        rotary = None
    return Cut(reshape, norm, permute, rotary, heads), dim


def _head_norm(layer, dim: int) -> bool:
    """Whether `layer` is an RMSNorm of each head alone (over its D coordinates, its weight its own) that SplitHeads
    takes in: D / 2 a power of two."""
    pairs = dim // 2
    return (isinstance(layer, RMSNorm) and layer.normalized_shape == (dim,) and layer.weight_slot is None
            and pairs & (pairs - 1) == 0)


def _only_reader(operand, graph_ends: set):
    """The one operator that reads `operand`, once, where it is no graph input or output; else None."""
    if operand.name in graph_ends or len(operand.consumers) != 1:
        return None
    reader = operand.consumers[0]
    return reader if reader.input_operands == [operand] else None


def _operator(split, cuts: list, positions: list, heads_class) -> RuntimeOperator:
    """The operator that does the split, its cuts and their rotaries: x (and the positions) in, the heads out."""
    normed = any(cut.norm is not None for cut in cuts)
    types = [split.type, "Tensor.reshape"] + (["nn.RMSNorm"] if normed else []) + ["Tensor.permute"] + \
        (["kuiper.RotaryEmbedding"] if positions else [])
    op = RuntimeOperator("+".join(types), split.name, line=split.line)
    source = split.input_operands[0]
    op.input_operands = [source, *positions]
    op.input_names = split.input_names[:1] + [""] * len(positions)
    op.output_operands = [(cut.rotary or cut.permute).output_operand for cut in cuts]
    for out in op.output_operands:
        out.producer = op
    head_dim = cuts[0].reshape.layer.shape[3]
    op.layer = heads_class(op, [cut.heads for cut in cuts], head_dim,
                           [None if cut.rotary is None else cut.rotary.layer for cut in cuts],
                           [None if cut.norm is None else cut.norm.layer for cut in cuts])
    op.absorbed = [split] + [o for cut in cuts for o in cut.operators]
    source.consumers = [c for c in source.consumers if c is not split] + [op]
    for operand in positions:
        operand.consumers = [c for c in operand.consumers if c not in op.absorbed] + [op]
    return op


def _joined_heads(attention, graph_ends: set):
    """(permute, reshape): what joins the heads of `attention`'s output again, as described above, or None."""
    layer = attention.layer
    if not isinstance(layer, CachedAttention) or layer.heads_last:
        return None
    permute = _only_reader(attention.output_operand, graph_ends)
    if permute is None or not isinstance(permute.layer, Permute) or permute.layer.axes != (0, 2, 1, 3):
        return None
    reshape = _only_reader(permute.output_operand, graph_ends)
    if reshape is None or not isinstance(reshape.layer, Reshape):
        return None
    shape = reshape.layer.shape
    recorded = attention.input_operands[0].shape
    batch = recorded[0] if recorded else None
    if len(shape) != 3 or shape[1] != -1 or shape[2] != layer.num_heads * layer.head_dim or shape[0] not in (-1, batch):
        return None
    return permute, reshape


def _heads_last(attention, permute, reshape) -> RuntimeOperator:
    """The attention's operator again, writing the joined heads: its inputs, the reshape's output."""
    op = RuntimeOperator("+".join(o.type for o in (attention, permute, reshape)), attention.name, line=attention.line)
    op.input_operands, op.input_names = attention.input_operands, attention.input_names
    op.output_operands = [reshape.output_operand]
    reshape.output_operand.producer = op
    op.layer, op.absorbed = attention.layer, [attention, permute, reshape]
    op.layer.op, op.layer.heads_last = op, True
    for operand in op.input_operands:
        operand.consumers = [op if c is attention else c for c in operand.consumers]
    return op
