"""Repeating and reversing: Tensor.expand, Tensor.expand_as, Tensor.repeat, torch.tile, torch.flip.

- expand(sizes) broadcasts: a size-1 dim grows to the size asked for, -1 keeps a dim, extra leading sizes
  add dims. expand_as(other) expands to other's shape. pnnx writes the sizes as numbers taken at export, so a
  size equal to the one the input had then is read as "keep" (-1), and follows another batch.
- repeat(sizes) tiles: dim i of the output is sizes[i] copies of dim i, extra leading sizes add dims;
  torch.tile(dims) is the same, except that fewer counts than dims repeat the last dims only.
- flip(dims) reverses the order along each of dims.

The OpenCL forwards: kuiper/opencl/expand.py.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index
from kuiper.layers.slice import IndexLayer


class BroadcastLayer(Layer):
    """A layer whose output is its first input broadcast to a shape (numpy's broadcast_to)."""

    def broadcast(self, shape: tuple, target: tuple) -> tuple:
        """`target` if a `shape` input broadcasts to it (a size-1 dim to any size), else a ShapeError."""
        if len(target) < len(shape) or any(n not in (1, m) for n, m in zip(shape[::-1], target[::-1])):
            raise self.shape_error(f"cannot expand a {shape} input to {target}")
        return target

    def forward_numpy(self, inputs, outputs):
        np.copyto(outputs[0], np.broadcast_to(inputs[0], outputs[0].shape))


@register("Tensor.expand")
class Expand(BroadcastLayer):
    def __init__(self, op):
        super().__init__(op)
        self.sizes = self.ints_param("sizes")
        if any(n < -1 for n in self.sizes):
            raise self.error(f"sizes={self.sizes} must be >= 0, or -1 to keep a dim")

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        added = len(self.sizes) - len(shape)
        if added < 0:
            raise self.shape_error(f"sizes={self.sizes} has fewer sizes than the {shape} input has dims")
        if -1 in self.sizes[:added]:
            raise self.shape_error(f"sizes={self.sizes}: -1 cannot size the {added} dim(s) it adds")
        recorded = self.input_shape(0)
        # a size equal to the input's size at export kept that dim then: it follows the input now
        was = recorded if recorded is not None and len(recorded) == len(shape) else (None,) * len(shape)
        target = self.sizes[:added] + tuple(
            n if size in (-1, then) else size for n, size, then in zip(shape, self.sizes[added:], was))
        return [self.broadcast(shape, target)]


@register("Tensor.expand_as")
class ExpandAs(BroadcastLayer):
    num_inputs = 2

    def output_shapes(self, input_shapes):
        return [self.broadcast(tuple(input_shapes[0]), tuple(input_shapes[1]))]


class RepeatLayer(Layer):
    """np.tile: `self.counts` copies along each dim, the input seen with leading size-1 dims if it has fewer."""

    counts: tuple = ()

    def check_counts(self, key: str) -> tuple:
        counts = self.ints_param(key)
        if any(n < 0 for n in counts):
            raise self.error(f"{key}={counts} must be >= 0")
        return counts

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        shape = (1,) * (len(self.counts) - len(shape)) + shape
        counts = (1,) * (len(shape) - len(self.counts)) + self.counts
        return [tuple(n * c for n, c in zip(shape, counts))]

    def forward_numpy(self, inputs, outputs):
        np.copyto(outputs[0], np.tile(inputs[0], self.counts))


@register("Tensor.repeat")
class Repeat(RepeatLayer):
    def __init__(self, op):
        super().__init__(op)
        self.counts = self.check_counts("sizes")

    def output_shapes(self, input_shapes):
        if len(self.counts) < len(input_shapes[0]):
            raise self.shape_error(f"sizes={self.counts} has fewer counts than the {tuple(input_shapes[0])} "
                                   f"input has dims")
        return super().output_shapes(input_shapes)


@register("torch.tile")
class Tile(RepeatLayer):
    def __init__(self, op):
        super().__init__(op)
        self.counts = self.check_counts("dims")


@register("torch.flip")
class Flip(IndexLayer):
    num_inputs = 1

    def __init__(self, op):
        super().__init__(op)
        self.dims = self.ints_param("dims")

    def index(self, shape):
        axes = [dim_index(self, d, len(shape)) for d in self.dims]
        if len(set(axes)) != len(axes):
            raise self.shape_error(f"dims={self.dims} name a dim twice")
        return tuple(slice(None, None, -1) if axis in axes else slice(None) for axis in range(len(shape)))
