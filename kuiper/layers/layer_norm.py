"""LayerNorm and GroupNorm: y = (x - mean) / sqrt(var + eps), then an optional weight and bias.

Both normalise groups of elements by their own statistics, computed at inference as in training:

* LayerNorm over the last len(normalized_shape) dims, so each (..., *normalized_shape) slice has mean 0 and
  variance 1; the weight and bias have the shape normalized_shape (one per normalised element).
* GroupNorm over the channels of an (N, C, *) input split into num_groups groups, and all their pixels;
  the weight and bias hold one value per channel.

Either way, the elements normalised together are one contiguous row of the input seen as (rows, length),
which is how both paths compute it. The variance is the biased one (the mean of the squared deviations from
the mean, two passes over the row, as PyTorch computes it) and eps is added inside the square root.

pnnx writes the module (nn.LayerNorm, nn.GroupNorm) with its weight and bias as attributes, and the function
(F.layer_norm, F.group_norm) with `weight=None` / `bias=None` when not given and each given one as the next
input ($weight, then $bias). pnnx 20261020 writes a submodule nn.LayerNorm(bias=False) as
elementwise_affine=False without its weight: nothing in the file tells, and the output differs from PyTorch's.

The OpenCL backend (kuiper/opencl/layer_norm.py) normalises each row in one work-group, its sums combined in
local memory.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

AFFINE = ("weight", "bias")


class Normalization(Layer):
    num_inputs = None  # the functional forms take their weight and bias as inputs

    def __init__(self, op):
        super().__init__(op)
        self.eps = self.float_param("eps", 1e-5)
        #: "weight" / "bias" -> an array (the module's attribute) or the input slot holding it (the function's)
        self.affine = {}

    def read_attributes(self, flag: str, shape: tuple) -> None:
        """The module form: both attributes when `flag` (elementwise_affine, affine) is True, none otherwise."""
        if self.bool_param(flag, True):
            self.affine = {key: self.weight(key, shape) for key in AFFINE}
        if len(self.op.input_operands) != 1:
            raise self.error(f"expects 1 input, the graph gives {len(self.op.input_operands)}")

    def read_inputs(self) -> None:
        """The functional form: `weight=None` (`bias=None`) says there is none; otherwise it is the next input."""
        slot = 1
        for key in AFFINE:
            if key in self.op.params:
                if self.param(key) is not None:
                    raise self.error(f"parameter '{key}' must be None or an input, got {self.param(key)!r}")
            else:
                self.affine[key] = slot
                slot += 1
        if len(self.op.input_operands) != slot:
            raise self.error(f"expects {slot} input(s) (input, {', '.join(self.affine) or 'no weight or bias'}), "
                             f"the graph gives {len(self.op.input_operands)}")

    def check_affine_inputs(self, shapes: list, expected: tuple) -> None:
        for key, source in self.affine.items():
            if isinstance(source, int) and tuple(shapes[source]) != expected:
                raise self.shape_error(f"{key} must have shape {expected}, got {tuple(shapes[source])}")

    def rows(self, shape: tuple) -> tuple:
        """(count, length): the input seen as rows, each normalised on its own."""
        raise NotImplementedError

    def affine_shape(self, shape: tuple) -> tuple:
        """The shape the weight and bias take to broadcast over an input of this shape."""
        raise NotImplementedError

    def affine_arrays(self, inputs: list) -> list:
        """[weight or None, bias or None], from the attributes or the inputs."""
        arrays = []
        for key in AFFINE:
            source = self.affine.get(key)
            arrays.append(inputs[source] if isinstance(source, int) else source)
        return arrays

    def output_shapes(self, input_shapes):
        return [tuple(input_shapes[0])]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        rows = x.reshape(self.rows(x.shape))
        mean = rows.mean(axis=1, keepdims=True)
        centred = rows - mean
        variance = (centred * centred).mean(axis=1, keepdims=True)
        out[...] = (centred / np.sqrt(variance + self.eps)).reshape(x.shape)
        weight, bias = self.affine_arrays(inputs)
        if weight is not None:
            out *= weight.reshape(self.affine_shape(x.shape))
        if bias is not None:
            out += bias.reshape(self.affine_shape(x.shape))


@register("nn.LayerNorm", "F.layer_norm")
class LayerNorm(Normalization):
    def __init__(self, op):
        super().__init__(op)
        shape = self.param("normalized_shape")  # pnnx writes a list, (96); PyTorch takes a single int too
        shape = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else \
            self.ints_param("normalized_shape")
        if not shape or min(shape) < 1:
            raise self.error(f"normalized_shape={list(shape)} must be one or more sizes >= 1")
        self.normalized_shape = shape
        if op.type == "nn.LayerNorm":
            self.read_attributes("elementwise_affine", shape)
        else:
            self.read_inputs()

    def output_shapes(self, input_shapes):
        shape, k = tuple(input_shapes[0]), len(self.normalized_shape)
        if shape[len(shape) - k:] != self.normalized_shape:
            raise self.shape_error(f"normalized_shape={self.normalized_shape} must end the input's shape, got {shape}")
        self.check_affine_inputs(input_shapes, self.normalized_shape)
        return [shape]

    def rows(self, shape):
        length = math.prod(self.normalized_shape)
        return math.prod(shape) // length, length

    def affine_shape(self, shape):
        return self.normalized_shape


@register("nn.GroupNorm", "F.group_norm")
class GroupNorm(Normalization):
    def __init__(self, op):
        super().__init__(op)
        self.num_groups = self.int_param("num_groups")
        if self.num_groups < 1:
            raise self.error(f"num_groups must be >= 1, got {self.num_groups}")
        if op.type == "nn.GroupNorm":
            # pnnx leaves num_channels out without affine: the input's channels are then all there is to check
            self.num_channels = self.int_param("num_channels") if "num_channels" in op.params else None
            if self.bool_param("affine", True) and self.num_channels is None:
                raise self.error("missing parameter 'num_channels' (needed for the affine weight and bias)")
            if self.num_channels is not None and (self.num_channels < 1 or self.num_channels % self.num_groups):
                raise self.error(f"num_channels={self.num_channels} must be a positive multiple of "
                                 f"num_groups={self.num_groups}")
            self.read_attributes("affine", (self.num_channels,))
        else:
            self.num_channels = None
            self.read_inputs()

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) < 2 or shape[1] % self.num_groups or shape[1] < 1:
            raise self.shape_error(f"expects input (N, C, ...) with C a multiple of num_groups={self.num_groups}, "
                                   f"got {shape}")
        if self.num_channels is not None and shape[1] != self.num_channels:
            raise self.shape_error(f"expects {self.num_channels} channels, got input {shape}")
        self.check_affine_inputs(input_shapes, (shape[1],))
        return [shape]

    def rows(self, shape):
        count = shape[0] * self.num_groups
        return count, math.prod(shape) // count if count else 0

    def affine_shape(self, shape):
        return (shape[1],) + (1,) * (len(shape) - 2)

