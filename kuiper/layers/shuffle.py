"""Channel and pixel shuffles: the channels regrouped, or traded for pixels, by one reshape-permute-reshape.

- nn.ChannelShuffle / F.channel_shuffle (groups g), ShuffleNet's: the C channels as g groups of C/g, read
  group-minor, so that channel k of group j moves to position k * g + j. pnnx writes it for the
  view-transpose-view that torchvision's ShuffleNetV2 spells out.
- F.pixel_shuffle (nn.PixelShuffle, upscale_factor r): (*, C r^2, H, W) -> (*, C, H r, W r), each channel's
  r x r block of sub-channels becoming an r x r block of pixels; F.pixel_unshuffle (nn.PixelUnshuffle,
  downscale_factor r) is its inverse.

Each layer says how to see the input as more dims (`split`) and how to reorder them; the output is the
reordered tensor read in order. The OpenCL forward: kuiper/opencl/shuffle.py.
"""

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


class ShuffleLayer(Layer):
    #: where the dims of `split` go: dim i of the reordered tensor is dim axes[i] of the split one
    axes: tuple = ()

    def split(self, shape: tuple) -> tuple:
        """The input of `shape`, seen with more dims (the same elements in the same order)."""
        raise NotImplementedError(f"{type(self).__name__} must implement split")

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        np.copyto(outputs[0], x.reshape(self.split(x.shape)).transpose(self.axes).reshape(outputs[0].shape))

    def positive_param(self, key: str) -> int:
        value = self.int_param(key)
        if value < 1:
            raise self.error(f"{key}={value} must be >= 1")
        return value


@register("nn.ChannelShuffle", "F.channel_shuffle")
class ChannelShuffle(ShuffleLayer):
    axes = (0, 2, 1, 3)

    def __init__(self, op):
        super().__init__(op)
        self.groups = self.positive_param("groups")

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) < 3:
            raise self.shape_error(f"shuffles the channels of an (N, C, ...) input of 3 dims or more, got {shape}")
        if shape[1] % self.groups:
            raise self.shape_error(f"groups={self.groups} does not divide the {shape[1]} channels of a {shape} input")
        return [shape]

    def split(self, shape):
        # (N, groups, C / groups, the rest): reading it as (N, C / groups, groups, ...) interleaves the groups
        return (shape[0], self.groups, shape[1] // self.groups, math.prod(shape[2:]))


class PixelLayer(ShuffleLayer):
    """What the pixel shuffles share: (*, C, H, W) inputs with a factor r."""

    key = ""

    def __init__(self, op):
        super().__init__(op)
        self.r = self.positive_param(self.key)

    def check(self, shape: tuple) -> tuple:
        if len(shape) < 3:
            raise self.shape_error(f"takes a (*, C, H, W) input of 3 dims or more, got {shape}")
        return shape


@register("F.pixel_shuffle", "nn.PixelShuffle")
class PixelShuffle(PixelLayer):
    key = "upscale_factor"
    axes = (0, 1, 4, 2, 5, 3)  # (B, C, r, r, H, W) -> (B, C, H, r, W, r)

    def output_shapes(self, input_shapes):
        *batch, c, h, w = self.check(tuple(input_shapes[0]))
        if c % (self.r * self.r):
            raise self.shape_error(f"upscale_factor={self.r} needs channels divisible by {self.r * self.r}, "
                                   f"got {c}")
        return [(*batch, c // (self.r * self.r), h * self.r, w * self.r)]

    def split(self, shape):
        *batch, c, h, w = shape
        return (math.prod(batch), c // (self.r * self.r), self.r, self.r, h, w)


@register("F.pixel_unshuffle", "nn.PixelUnshuffle")
class PixelUnshuffle(PixelLayer):
    key = "downscale_factor"
    axes = (0, 1, 3, 5, 2, 4)  # (B, C, H, r, W, r) -> (B, C, r, r, H, W)

    def output_shapes(self, input_shapes):
        *batch, c, h, w = self.check(tuple(input_shapes[0]))
        if h % self.r or w % self.r:
            raise self.shape_error(f"downscale_factor={self.r} must divide the height and width, got {h} x {w}")
        return [(*batch, c * self.r * self.r, h // self.r, w // self.r)]

    def split(self, shape):
        *batch, c, h, w = shape
        return (math.prod(batch), c, h // self.r, self.r, w // self.r, self.r)
