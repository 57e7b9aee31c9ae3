"""torch.sum and torch.mean over some dimensions (all of them when no dim is given), keeping them as size 1
with keepdim."""

from __future__ import annotations

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


class Reduce(Layer):
    #: the numpy reduction, called as reduction(x, axis=..., keepdims=..., out=...)
    reduction: staticmethod

    def __init__(self, op):
        super().__init__(op)
        dim = self.param("dim", None)
        # pnnx writes dim=(1) for dim=1 and dim=None (or nothing) for "all"; PyTorch reads dim=[] as all too
        if dim is None or dim in ([], ()):
            self.dims = None
        else:
            self.dims = (dim,) if isinstance(dim, int) and not isinstance(dim, bool) else self.ints_param("dim")
        self.keepdim = self.bool_param("keepdim", False)

    def axes(self, ndim: int) -> tuple:
        """The dims to reduce as non-negative axes of an ndim-D input."""
        if self.dims is None:
            return tuple(range(ndim))
        if not all(-ndim <= d < ndim for d in self.dims):
            raise self.shape_error(f"dim={list(self.dims)} is out of range for a {ndim}-D input")
        axes = tuple(d % ndim for d in self.dims)
        if len(set(axes)) != len(axes):
            raise self.shape_error(f"dim={list(self.dims)} names a dimension twice")
        return axes

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        axes = self.axes(len(shape))
        if self.keepdim:
            return [tuple(1 if a in axes else size for a, size in enumerate(shape))]
        return [tuple(size for a, size in enumerate(shape) if a not in axes)]

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        self.reduction(x, axis=self.axes(x.ndim), keepdims=self.keepdim, out=outputs[0])


@register("torch.sum")
class Sum(Reduce):
    reduction = staticmethod(np.sum)

    def output_dtypes(self, input_dtypes):
        # PyTorch sums booleans and integers into int64
        dtype = input_dtypes[0] if input_dtypes else np.dtype(np.float32)
        return [np.dtype(np.int64) if dtype.kind in "biu" else dtype]


@register("torch.mean")
class Mean(Reduce):
    reduction = staticmethod(np.mean)
