"""Split (torch.split, torch.tensor_split): cut the input along dim into the operator's outputs.

SplitLayer holds what every cutting layer shares (chunk.py uses it too); a subclass only says how long
each piece is. The OpenCL forward of every cutting layer: kuiper/opencl/split.py.
"""

import itertools

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index


def equal_pieces(length: int, size: int):
    """Pieces of `size` along a dim of `length`; the last one is shorter when size does not divide it."""
    return (min(size, length - start) for start in range(0, length, size))


class SplitLayer(Layer):
    def __init__(self, op):
        super().__init__(op)
        self.dim = self.int_param("dim", 0)

    def sizes(self, length: int):
        """The length of each piece when the dim being cut has `length` elements, as an iterable: read only
        as far as the operator has outputs (a corrupt size could make billions of pieces)."""
        raise NotImplementedError(f"{type(self).__name__} must implement sizes")

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        axis = dim_index(self, self.dim, len(shape))
        outputs = len(self.op.output_operands)
        sizes = list(itertools.islice(self.sizes(shape[axis]), outputs + 1))
        # the graph fixed the number of outputs at export; an input that cuts into another count cannot run
        if len(sizes) != outputs:
            count = f"more than {outputs}" if len(sizes) > outputs else len(sizes)
            raise self.shape_error(f"cuts dim {self.dim} of a {shape} input into {count} pieces, "
                                   f"the operator has {outputs} outputs")
        return [shape[:axis] + (size,) + shape[axis + 1:] for size in sizes]

    def walked(self, walk, shape, output: int):
        """Where piece `output`'s elements sit, given the input's walk (layers/walk.py)."""
        axis = dim_index(self, self.dim, len(shape))
        lengths = [piece[axis] for piece in self.output_shapes([shape])]
        return walk.narrowed(axis, sum(lengths[:output]), lengths[output])

    def forward_numpy(self, inputs, outputs):
        # the outputs already have the piece lengths; their running sum gives the cut positions
        cuts = np.cumsum([out.shape[self.dim] for out in outputs[:-1]])
        for out, piece in zip(outputs, np.split(inputs[0], cuts, axis=self.dim)):
            np.copyto(out, piece)


@register("torch.split")
class Split(SplitLayer):
    """split_size_or_sections is one piece length (the last piece may be shorter) or the list of lengths."""

    def __init__(self, op):
        super().__init__(op)
        if isinstance(self.param("split_size_or_sections"), (list, tuple)):
            self.size = None
            self.sections = self.ints_param("split_size_or_sections")
            if any(s < 0 for s in self.sections) or len(self.sections) != len(op.output_operands):
                raise self.error(f"split_size_or_sections={self.sections} must be {len(op.output_operands)} "
                                 f"sizes >= 0, one per output")
        else:
            self.size = self.int_param("split_size_or_sections")
            if self.size <= 0:
                raise self.error(f"split_size_or_sections={self.size} must be > 0")

    def sizes(self, length):
        if self.size is not None:
            return equal_pieces(length, self.size)
        if sum(self.sections) != length:
            raise self.shape_error(f"split_size_or_sections={self.sections} sums to {sum(self.sections)}, "
                                   f"dim {self.dim} has {length}")
        return list(self.sections)


@register("torch.tensor_split")
class TensorSplit(SplitLayer):
    """`sections=n`: n pieces as equal as can be, the first ones longer (numpy's array_split);
    `indices=(i, j, ...)`: cut before each index, a negative one counting from the end (pnnx writes
    `x[..., :-1], x[..., -1:]` as `indices=(-1)`: timm's EfficientViT)."""

    def __init__(self, op):
        super().__init__(op)
        if "indices" in op.params:
            self.sections = None
            self.indices = self.ints_param("indices")
            ahead, behind = [i for i in self.indices if i >= 0], [i for i in self.indices if i < 0]
            if list(self.indices) != sorted(ahead) + sorted(behind):
                # PyTorch also reads decreasing indices as slices; such pieces may overlap
                raise self.error(f"indices={self.indices} must be in increasing order (negative ones, counted "
                                 f"from the end, after the others)")
        else:
            self.sections = self.int_param("sections")
            if self.sections <= 0:
                raise self.error(f"sections={self.sections} must be > 0")

    def sizes(self, length):
        if self.sections is not None:
            small, longer = divmod(length, self.sections)
            return (small + (k < longer) for k in range(self.sections))
        # an index past either end cuts at that end, leaving empty pieces
        bounds = [max(0, min(i + length if i < 0 else i, length)) for i in (0, *self.indices, length)]
        if bounds != sorted(bounds):
            raise self.shape_error(f"indices={self.indices} cut a dim of {length} out of order, at {bounds[1:-1]}")
        return [b - a for a, b in zip(bounds, bounds[1:])]
