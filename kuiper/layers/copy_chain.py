"""A chain of operators that only move elements (permute, transpose, reshape, a piece of a split or chunk), run
as one strided copy from the chain's input.

The copies pass (kuiper/runtime/copies.py) makes these. Each operator of the chain says where its output's
elements sit given where its input's do (`walked`, on a layers/walk.py Walk); followed from the chain's
input, the walks give the strides of one copy that writes the chain's output directly. Swin's window
partition, `reshape -> permute -> reshape`, is one copy instead of two, and a chunk of q, k, v each followed by
`reshape -> permute` is three copies instead of six.

Where a walk cannot follow (a reshape that would have to split a finer dim it does not divide), the chain
copies what it has so far into a work buffer and walks on from there: several copies, never a wrong one.
MaxViT's turn from windows to a grid, `reshape -> permute -> reshape -> permute -> reshape -> transpose`, reads
a 56-pixel row as 8 x 7 and then as 7 x 8: two copies instead of three.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.walk import Walk

class CopyChain(Layer):
    """`steps`: [(layer, output index)], the chain's operators in order, each reading the one before."""

    def __init__(self, op, steps: list):
        super().__init__(op)
        self.steps = steps
        self._copies = {}  # input shape -> copies(): forward meets the same few shapes

    def _shapes(self, shape: tuple) -> list:
        """The input's shape, then each step's output shape."""
        shapes = [tuple(shape)]
        for layer, output in self.steps:
            shapes.append(tuple(layer.output_shapes([shapes[-1]])[output]))
        return shapes

    def output_shapes(self, input_shapes):
        return [self._shapes(input_shapes[0])[-1]]

    def output_dtypes(self, input_dtypes):
        return [input_dtypes[0]]

    def copies(self, shape: tuple) -> list:
        """[(walk, shape it writes)]: the copies that do the chain, each reading what the one before wrote (the
        first, the input). Usually one; none for an empty output."""
        copies = self._copies.get(shape)
        if copies is None:
            shapes = self._shapes(shape)
            copies = []
            if math.prod(shapes[-1]):
                walk = Walk.dense(shape)
                for (layer, output), before in zip(self.steps, shapes):
                    moved = layer.walked(walk, before, output)
                    if moved is None:  # write what the walk has reached; walk on from that contiguous copy
                        copies.append((walk, before))
                        moved = layer.walked(Walk.dense(before), before, output)
                    walk = moved
                copies.append((walk, shapes[-1]))
            self._copies[shape] = copies
        return copies

    def forward_numpy(self, inputs, outputs):
        source = inputs[0]
        copies = self.copies(source.shape)
        for k, (walk, shape) in enumerate(copies):
            target = outputs[0] if k == len(copies) - 1 else np.empty(shape, source.dtype)
            sizes, strides = walk.fine()
            read = np.lib.stride_tricks.as_strided(source.reshape(-1)[walk.offset:], sizes,
                                                   [s * source.itemsize for s in strides])
            np.copyto(target.reshape(sizes), read)
            source = target
