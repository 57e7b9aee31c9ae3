"""BatchNorm2d (and BatchNorm1d) at inference: y = (x - mean) / sqrt(var + eps) * weight + bias, per channel.

With frozen statistics this is an affine map per channel, y = x * scale + shift, so the constructor folds
the four vectors into `scale` and `shift` once and forward is a multiply and an add. The OpenCL backend
(kuiper/opencl/batchnorm2d.py) runs the same two operations per element, split over work-items in one of
three ways chosen by shape and device. BatchNorm1d normalizes (N, C) or (N, C, L) the same way, computed as
BatchNorm2d on the (N, C, L, 1) view: LeViT and RepViT put it after their linear layers.
"""

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("nn.BatchNorm2d")
class BatchNorm2d(Layer):
    def __init__(self, op):
        super().__init__(op)
        c = self.num_features = self.int_param("num_features")
        if c < 1:
            raise self.error(f"num_features must be >= 1, got {c}")
        eps = self.float_param("eps", 1e-5)
        mean = self.weight("running_mean", (c,)).astype(np.float64)
        var = self.weight("running_var", (c,)).astype(np.float64)
        if np.any(var + eps <= 0):
            raise self.error("running_var + eps must be positive")
        scale = 1.0 / np.sqrt(var + eps)
        shift = -mean * scale
        if self.bool_param("affine", True):
            weight = self.weight("weight", (c,))
            scale, shift = scale * weight, shift * weight + self.weight("bias", (c,))
        # folded in float64, stored float32 as (C, 1, 1) to broadcast over (N, C, H, W)
        self.scale = scale.astype(np.float32).reshape(c, 1, 1)
        self.shift = shift.astype(np.float32).reshape(c, 1, 1)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) != 4 or shape[1] != self.num_features:
            raise self.shape_error(f"expects input (N, {self.num_features}, H, W), got {shape}")
        return [shape]

    def forward_numpy(self, inputs, outputs):
        np.multiply(inputs[0], self.scale, out=outputs[0])
        outputs[0] += self.shift



def as_planes(shape: tuple) -> tuple:
    """(N, C) or (N, C, L) as the (N, C, L, 1) of BatchNorm2d's planes (L = 1 for (N, C))."""
    return (*shape[:2], math.prod(shape[2:]), 1)


@register("nn.BatchNorm1d")
class BatchNorm1d(BatchNorm2d):
    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) not in (2, 3) or shape[1] != self.num_features:
            raise self.shape_error(f"expects input (N, {self.num_features}) or (N, {self.num_features}, L), got "
                                   f"{shape}")
        return [shape]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        super().forward_numpy([x.reshape(as_planes(x.shape))], [out.reshape(as_planes(out.shape))])
