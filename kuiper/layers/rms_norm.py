"""RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, over the last len(normalized_shape) dims.

LayerNorm (layer_norm.py) subtracts the mean and divides by the standard deviation; RMSNorm skips the mean and
divides by the root mean square alone. One statistic instead of two, no bias, and in practice as good: Llama,
Qwen, Mistral and their relatives normalise with it before each attention and each MLP, and once at the end.

The statistic is computed in float32 whatever the weights were stored in (a checkpoint's fp16 or bf16 weights
are widened when the graph loads them), as Hugging Face's models compute it; half precision would lose the
small squares of a long row. `eps` keeps a row of zeros from dividing by zero; pnnx writes eps=None when the
module was made without one, which PyTorch reads as the machine epsilon of the input's dtype.

What pnnx writes: nn.RMSNorm with normalized_shape, eps and elementwise_affine, the weight as `@weight` when the
module has one (pnnx's writer sets elementwise_affine only where the module has a weight *and* a bias, which
RMSNorm never has, so the attribute is what tells); F.rms_norm with `weight=None`, or the weight as a second
input ($weight), as F.layer_norm does.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

#: PyTorch's eps when none is given: float32's machine epsilon
FLOAT32_EPS = float(np.finfo(np.float32).eps)


@register("nn.RMSNorm", "F.rms_norm")
class RMSNorm(Layer):
    num_inputs = None  # F.rms_norm takes its weight as a second input

    def __init__(self, op):
        super().__init__(op)
        shape = self.param("normalized_shape")  # a list, (96); PyTorch takes a single int too
        shape = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else \
            self.ints_param("normalized_shape")
        if not shape or min(shape) < 1:
            raise self.error(f"normalized_shape={list(shape)} must be one or more sizes >= 1")
        self.normalized_shape = tuple(shape)
        self.eps = FLOAT32_EPS if self.param("eps", None) is None else self.float_param("eps")
        if self.eps < 0:
            raise self.error(f"eps={self.eps} must be >= 0")
        self.scale = None        # the module's weight, an array
        self.weight_slot = None  # the function's: the input slot holding the weight
        if op.type == "nn.RMSNorm":
            self.bool_param("elementwise_affine", True)  # read, but the attribute decides (see the docstring)
            self.scale = self.weight("weight", self.normalized_shape, required=False)
            expected = 1
        elif "weight" in op.params:
            if self.param("weight") is not None:
                raise self.error(f"parameter 'weight' must be None or an input, got {self.param('weight')!r}")
            expected = 1
        else:
            self.weight_slot, expected = 1, 2
        if len(op.input_operands) != expected:
            raise self.error(f"expects {expected} input(s), the graph gives {len(op.input_operands)}")

    def output_shapes(self, input_shapes):
        shape, k = tuple(input_shapes[0]), len(self.normalized_shape)
        if shape[len(shape) - k:] != self.normalized_shape:
            raise self.shape_error(f"normalized_shape={self.normalized_shape} must end the input's shape, got {shape}")
        if self.weight_slot is not None and tuple(input_shapes[1]) != self.normalized_shape:
            raise self.shape_error(f"weight must have shape {self.normalized_shape}, got {tuple(input_shapes[1])}")
        return [shape]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        length = math.prod(self.normalized_shape)
        rows = x.reshape(-1, length).astype(np.float32, copy=False)
        mean_square = np.mean(rows * rows, axis=1, keepdims=True, dtype=np.float32)
        out[...] = (rows / np.sqrt(mean_square + np.float32(self.eps))).reshape(x.shape)
        weight = self.scale if self.weight_slot is None else inputs[self.weight_slot]
        if weight is not None:
            out *= weight
