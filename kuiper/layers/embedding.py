"""Embedding: a lookup table. Token id i becomes row i of a (num_embeddings, embedding_dim) weight matrix.

    ids (...) int64  ->  out (..., embedding_dim) float32,   out[..., :] = weight[ids[...], :]

This is how a language model turns text into numbers: the tokenizer maps text to ids, and the embedding maps
each id to a learned vector. It computes nothing, it only copies rows, so its cost is one row per token; a
one-hot vector times the weight matrix gives the same result at embedding_dim x num_embeddings times the cost.

An id outside [0, num_embeddings) has no row. PyTorch raises an index error for it, and so does this layer:
kuiper's InputError naming the operator and the id, since the id came from the caller's data, not the model.

What pnnx writes: nn.Embedding with num_embeddings, embedding_dim and sparse (a training option), the table as
`@weight`; F.embedding with the table as a second input ($weight), scale_grad_by_freq and sparse (both
training options, changing nothing at inference).
"""

from __future__ import annotations

import numpy as np

from kuiper.core.errors import InputError
from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("nn.Embedding", "F.embedding")
class Embedding(Layer):
    num_inputs = None  # F.embedding takes its table as a second input
    harmless_params = frozenset({"sparse", "scale_grad_by_freq", "padding_idx"})  # training options
    #: the caller checks the ids before each forward (a language model does, on the host: kuiper/llm/model.py), so
    #: a backend that would read them back from the device to check them (OpenCL) need not
    ids_checked = False

    def __init__(self, op):
        super().__init__(op)
        if op.type == "nn.Embedding":
            self.num_embeddings = self.int_param("num_embeddings")
            self.embedding_dim = self.int_param("embedding_dim")
            if self.num_embeddings < 1 or self.embedding_dim < 1:
                raise self.error(f"num_embeddings={self.num_embeddings} and embedding_dim={self.embedding_dim} "
                                 f"must be >= 1")
            self.table = self.weight("weight", (self.num_embeddings, self.embedding_dim))
            expected = 1
        else:
            self.table = None  # the second input, its size known when the graph runs
            expected = 2
        if len(op.input_operands) != expected:
            raise self.error(f"expects {expected} input(s), the graph gives {len(op.input_operands)}")

    def output_shapes(self, input_shapes):
        ids = tuple(input_shapes[0])
        if self.table is not None:
            return [ids + (self.embedding_dim,)]
        table = tuple(input_shapes[1])
        if len(table) != 2:
            raise self.shape_error(f"expects a 2-d table (num_embeddings, embedding_dim), got {table}")
        return [ids + (table[1],)]

    def output_dtypes(self, input_dtypes):
        if np.dtype(input_dtypes[0]).kind not in "iu":
            raise self.shape_error(f"expects integer ids, got {np.dtype(input_dtypes[0])}")
        return [np.dtype(np.float32)]

    def check_ids(self, ids: np.ndarray, rows: int) -> None:
        """An InputError unless every id names one of the table's `rows` rows."""
        if ids.size:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= rows:
                raise InputError(f"{self.op.type} operator '{self.op.name}': id {low if low < 0 else high} is out of "
                                 f"range: the table has {rows} rows (ids 0..{rows - 1})")

    def forward_numpy(self, inputs, outputs):
        ids = inputs[0]
        table = self.table if self.table is not None else inputs[1]
        self.check_ids(ids, table.shape[0])
        # fancy indexing gathers the rows: one copy of embedding_dim floats per id
        np.take(table, ids, axis=0, out=outputs[0])
