"""torch.sum, torch.mean, torch.amax, torch.amin and torch.norm over some dimensions (all of them when no dim is
given), keeping them as size 1 with keepdim; and F.normalize, which divides by a norm. The numpy forwards are numpy's reductions;
the OpenCL ones are kuiper/opencl/reduce.py.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.operators import make_operator
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


@register("torch.amax")
class Amax(Reduce):
    """The largest element (a NaN, once met, is the answer, as in PyTorch). Hiera pools its mask units so."""

    reduction = staticmethod(np.amax)


@register("torch.amin")
class Amin(Reduce):
    reduction = staticmethod(np.amin)


@register("torch.norm")
class Norm(Reduce):
    """The p-norm (sum |x|^p)^(1/p): p=inf is the largest |x|, p=-inf the smallest, p=0 the count of nonzeros.
    pnnx writes torch.linalg.vector_norm as torch.norm too, and the Frobenius norm as p=2."""

    def __init__(self, op):
        super().__init__(op)
        # torch.norm's p='fro' over any dims is the 2-norm of the elements (pnnx writes it as p=2 already)
        self.p = 2.0 if self.param("p", None) == "fro" else self.float_param("p", 2.0, finite=False)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        # as in PyTorch: the norms with no value for no elements (no sum that starts at 0) are refused
        if (self.p < 0 or self.p == math.inf) and any(shape[a] == 0 for a in self.axes(len(shape))):
            raise self.shape_error(f"p={self.p} has no value over an empty dim: input {shape}")
        return super().output_shapes(input_shapes)

    def forward_numpy(self, inputs, outputs):
        out, magnitude = outputs[0], np.abs(inputs[0])
        reduce = dict(axis=self.axes(magnitude.ndim), keepdims=self.keepdim, out=out)
        if self.p == math.inf:
            np.max(magnitude, **reduce)
        elif self.p == -math.inf:
            np.min(magnitude, **reduce)
        elif self.p == 0:
            np.sum(magnitude != 0, **reduce)
        else:
            with np.errstate(divide="ignore"):  # a negative p makes |0|^p infinite, as in PyTorch
                np.sum(magnitude ** self.p, **reduce)
                np.power(out, 1 / self.p, out=out)

    def output_dtypes(self, input_dtypes):
        # a norm is fractional: float inputs keep their width, others give PyTorch's default float
        dtype = input_dtypes[0] if input_dtypes else np.dtype(np.float32)
        return [dtype if dtype.kind == "f" else np.dtype(np.float32)]


@register("F.normalize")
class Normalize(Layer):
    """x / max(||x||_p, eps) along `dim`: the vectors along dim scaled to norm 1."""

    def __init__(self, op):

        super().__init__(op)
        self.eps = self.float_param("eps", 1e-12)
        norm = dict(dim=[self.int_param("dim", 1)], keepdim=True, p=self.float_param("p", 2.0, finite=False))
        self.norm = Norm(make_operator("torch.norm", f"{op.name}.norm", norm, input_shapes=[self.input_shape(0)]))

    def output_shapes(self, input_shapes):
        self.norm.output_shapes(input_shapes)
        return [tuple(input_shapes[0])]

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        (norm,) = self.norm.run_numpy(x)
        np.divide(x, np.maximum(norm, self.eps, out=norm), out=outputs[0])
