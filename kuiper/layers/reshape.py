"""Reshape (Tensor.reshape, Tensor.view): the same elements, in the same order, under a new shape.

pnnx writes the target shape as literal numbers taken at export time, the batch included: a model exported
at batch 2 that does `x.view(x.size(0), -1)` is stored as `Tensor.reshape shape=(2,384)`. So that the graph
can run at other batch sizes, a literal first size equal to the recorded batch follows the input's batch.

This module also holds what the other shape layers share: PyTorch's dim rule and the copy-only forward.
"""

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


def dim_index(layer, dim: int, rank: int) -> int:
    """PyTorch's dim rule: -rank <= dim < rank, a negative dim counts from the end. ShapeError otherwise."""
    if not -rank <= dim < rank:
        raise layer.shape_error(f"dim {dim} is out of range [{-rank}, {rank - 1}]")
    return dim % rank


class ViewLayer(Layer):
    """A layer that changes only the shape, never the element order.

    Forward copies the input into the preallocated output, read under the output's shape; subclasses give
    output_shapes. Where the input has no other reader the fusion pass makes the output a view of the input's
    buffer (runtime/fusion.py), and there is nothing to copy. The OpenCL forward of every view layer:
    kuiper/opencl/reshape.py.
    """

    def walked(self, walk, shape, output: int):
        """Where the output's elements sit, given the input's walk (layers/walk.py)."""
        return walk.reshaped(self.output_shapes([shape])[0])

    def forward_numpy(self, inputs, outputs):
        if not np.may_share_memory(outputs[0], inputs[0]):
            np.copyto(outputs[0], inputs[0].reshape(outputs[0].shape))


@register("Tensor.reshape", "Tensor.view")
class Reshape(ViewLayer):
    num_inputs = None  # counted in __init__, to explain the two-input form pnnx writes

    def __init__(self, op):
        super().__init__(op)
        if len(op.input_operands) != 1:
            # a dynamic-shape export computes the shape at run time (pnnx.Expression) and passes it as $shape
            raise self.error("takes the target shape from a tensor input (a dynamic-shape export); "
                             "export with fixed input shapes so that pnnx writes shape=(...)")
        self.shape = self.ints_param("shape")
        if self.shape.count(-1) > 1 or any(d < -1 for d in self.shape):
            raise self.error(f"shape={self.shape} may hold one -1, every other size must be >= 0")

    def output_shapes(self, input_shapes):
        given = tuple(input_shapes[0])
        recorded = self.input_shape(0)
        shape = list(self.shape)
        # the export's batch, written as a literal first size, becomes the batch the graph runs at now
        if (recorded and isinstance(recorded[0], int) and given and shape
                and given[0] != recorded[0] and shape[0] == recorded[0]):
            shape[0] = given[0]
        count = math.prod(given)
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = count // known if known else 0
        if math.prod(shape) != count:
            raise self.shape_error(
                f"cannot reshape a {given} input to shape={self.shape} (the .param recorded a {recorded} "
                f"input; only a first size equal to the recorded batch follows a new batch)")
        return [tuple(shape)]


@register("Tensor.reshape_as", "Tensor.view_as")
class ReshapeAs(Layer):
    """x.reshape_as(other): x's elements under other's shape (LeViT's residual MLPs). Its second input is read
    for its shape only. Not a ViewLayer, whose output the fusion pass lays over its one input's buffer: the
    forward copies."""

    num_inputs = 2

    def output_shapes(self, input_shapes):
        given, target = (tuple(shape) for shape in input_shapes)
        if math.prod(given) != math.prod(target):
            raise self.shape_error(f"cannot reshape a {given} input as the {target} one")
        return [target]

    def forward_numpy(self, inputs, outputs):
        np.copyto(outputs[0], inputs[0].reshape(outputs[0].shape))
