"""Slicing and selecting (Tensor.slice, torch.narrow, Tensor.select, torch.unbind): parts of a tensor.

pnnx writes x[:, 1:-1] as `Tensor.slice dim=1 start=1 end=-1 step=1`, and an index over several dims,
x[:, 0, 1:4:2], as one Tensor.slice with lists: `dims=(1,2) starts=(0,1) ends=(0,4) steps=(0,2)
selects=(0,2147483647)`. A `selects` entry other than 2147483647 picks that one index and drops the dim (its
start, end and step are then 0 and mean nothing). 2147483647, the largest int pnnx writes, is also the end of
x[1:]. Starts and ends follow Python's slicing: negative ones count from the end, then both are clamped to the
dim, so a slice reaching past either end is shorter or empty, never an error. Steps are >= 1: PyTorch has no
negative steps (torch.flip reverses a dim).

Every layer here reads its input through a numpy index (an int or a slice per dim): numpy's `x[index]` is the
reference (the OpenCL forward, kuiper/opencl/slice.py, copies the same index's view of the input).
"""

from typing import NamedTuple

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register
from kuiper.layers.reshape import dim_index

#: pnnx's "to the end" and "no select": int64's maximum, clamped to int32 by its writer
END = 2**31 - 1


def indexed_shape(shape: tuple, index: tuple) -> tuple:
    """The shape of numpy's `array[index]` for an array of `shape`, `index` an int or a slice per leading dim."""
    kept = tuple(len(range(n)[part]) for n, part in zip(shape, index) if isinstance(part, slice))
    return kept + tuple(shape[len(index):])


def refuse_tensor_inputs(layer, what: str) -> None:
    """A dynamic-shape export computes `what` at run time and passes it as extra tensor inputs ($end, $index
    ...): the layers here need it as numbers when the graph is built."""
    if len(layer.op.input_operands) != 1:
        slots = ", ".join(f"${name}" for name in layer.op.input_names[1:] if name) or "extra inputs"
        raise layer.error(f"takes {what} from tensors ({slots}), as a dynamic-shape export writes it; export with "
                          f"fixed input shapes so that pnnx writes numbers")


def held_index(layer, index: int, size: int, axis: int) -> int:
    """PyTorch's rule for an index that holds a dim: -size <= index < size, a negative one from the end."""
    if not -size <= index < size:
        raise layer.shape_error(f"index {index} is out of range for dim {axis} of size {size}")
    return index % size


class IndexLayer(Layer):
    """A layer whose output is `input[index]`: subclasses give the index for an input shape."""

    num_inputs = None  # counted by refuse_tensor_inputs, to explain the dynamic-shape form

    def index(self, shape: tuple) -> tuple:
        """The numpy index (an int or a slice per dim, in order) that this layer applies to a `shape` input."""
        raise NotImplementedError(f"{type(self).__name__} must implement index")

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        return [indexed_shape(shape, self.index(shape))]

    def forward_numpy(self, inputs, outputs):
        np.copyto(outputs[0], inputs[0][self.index(inputs[0].shape)])


class Cut(NamedTuple):
    """One dim of a Tensor.slice: its range, or the one index it selects (END: none)."""

    dim: int
    start: int
    end: int
    step: int
    select: int


@register("Tensor.slice")
class Slice(IndexLayer):
    def __init__(self, op):
        super().__init__(op)
        refuse_tensor_inputs(self, "its starts or ends")
        if "dims" in op.params:
            dims = self.ints_param("dims")
            values = [self.ints_param(key, len(dims)) for key in ("starts", "ends", "steps", "selects")]
            self.cuts = [Cut(*cut) for cut in zip(dims, *values)]
        else:  # the form for one dim
            self.cuts = [Cut(self.int_param("dim"), self.int_param("start"), self.int_param("end"),
                             self.int_param("step", 1), END)]
        for cut in self.cuts:
            if cut.select == END and cut.step < 1:
                raise self.error(f"step={cut.step} along dim {cut.dim} must be >= 1 (PyTorch slices have no "
                                 f"negative steps)")

    def index(self, shape):
        index = [slice(None)] * len(shape)
        axes = [dim_index(self, cut.dim, len(shape)) for cut in self.cuts]
        if len(set(axes)) != len(axes):
            raise self.shape_error(f"dims={tuple(cut.dim for cut in self.cuts)} name a dim twice")
        for axis, cut in zip(axes, self.cuts):
            if cut.select == END:
                index[axis] = slice(cut.start, cut.end, cut.step)
            else:
                index[axis] = held_index(self, cut.select, shape[axis], axis)
        return tuple(index)


@register("torch.narrow")
class Narrow(IndexLayer):
    """`length` elements from `start` along dim; unlike a slice, a range past the end is an error."""

    def __init__(self, op):
        super().__init__(op)
        refuse_tensor_inputs(self, "its start")
        self.dim, self.start, self.length = (self.int_param(key) for key in ("dim", "start", "length"))
        if self.length < 0:
            raise self.error(f"length={self.length} must be >= 0")

    def index(self, shape):
        axis = dim_index(self, self.dim, len(shape))
        n = shape[axis]
        start = self.start + n if self.start < 0 else self.start
        if not 0 <= start <= n - self.length:
            raise self.shape_error(f"start={self.start} length={self.length} does not fit in dim {self.dim} "
                                   f"of size {n}")
        return (slice(None),) * axis + (slice(start, start + self.length),)


@register("Tensor.select")
class Select(IndexLayer):
    """x.select(dim, index), x[:, index]: the slice at `index` along dim, which is dropped."""

    def __init__(self, op):
        super().__init__(op)
        refuse_tensor_inputs(self, "its index")
        self.dim = self.int_param("dim")
        self.at = self.int_param("index")

    def index(self, shape):
        axis = dim_index(self, self.dim, len(shape))
        return (slice(None),) * axis + (held_index(self, self.at, shape[axis], axis),)


@register("torch.unbind")
class Unbind(Layer):
    """One output per index along dim, the dim dropped: torch.unbind(x, dim) is x.select(dim, i) for each i."""

    def __init__(self, op):
        super().__init__(op)
        self.dim = self.int_param("dim", 0)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        axis = dim_index(self, self.dim, len(shape))
        # the export fixed the number of outputs: the dim must still have that many entries
        if shape[axis] != len(self.op.output_operands):
            raise self.shape_error(f"dim {self.dim} of a {shape} input has {shape[axis]} entries, the operator "
                                   f"has {len(self.op.output_operands)} outputs")
        return [shape[:axis] + shape[axis + 1:]] * shape[axis]

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        for i, out in enumerate(outputs):
            np.copyto(out, np.take(x, i, axis=self.dim))
