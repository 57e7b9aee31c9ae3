"""kuiper.Tensor: a batched NCHW array, a thin layer over numpy.

KuiperInfer's C++ Tensor wraps an Armadillo cube and re-implements reshape, padding and element-wise ops.
In Python numpy already does all of that well, so Tensor only adds what an inference engine talks about:
NCHW accessors, padding in KuiperInfer's (top, bottom, left, right) order, and clear view-vs-copy rules.
Everything returns a Tensor; `numpy()` hands out the array underneath without copying.
"""

from __future__ import annotations

import numpy as np


class Tensor:
    """A float32 (by default) array. Rank 4 is read as (batch, channels, rows, cols)."""

    __slots__ = ("data",)

    def __init__(self, data, dtype=np.float32):
        # np.asarray does not copy when `data` is already an array of this dtype: a Tensor can be a view.
        self.data = np.asarray(data, dtype=dtype)

    # ---- construction ------------------------------------------------------------------------------
    @classmethod
    def zeros(cls, *shape, dtype=np.float32) -> "Tensor":
        return cls(np.zeros(normalize_shape(shape), dtype=dtype), dtype)

    @classmethod
    def empty(cls, *shape, dtype=np.float32) -> "Tensor":
        """Uninitialised memory: the fastest way to get an output buffer that will be overwritten."""
        return cls(np.empty(normalize_shape(shape), dtype=dtype), dtype)

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "Tensor":
        """Wrap an existing array without copying (it keeps its dtype)."""
        return cls(array, array.dtype)

    # ---- shape --------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def _dim(self, axis_from_end: int) -> int:
        return self.shape[-axis_from_end] if self.ndim >= axis_from_end else 1

    @property
    def batch(self) -> int:
        return self._dim(4)

    @property
    def channels(self) -> int:
        return self._dim(3)

    @property
    def rows(self) -> int:
        return self._dim(2)

    @property
    def cols(self) -> int:
        return self._dim(1)

    def is_view_of(self, other: "Tensor") -> bool:
        """True when both tensors read the same memory (a view, not a copy)."""
        return np.shares_memory(self.data, other.data)

    # ---- host access --------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The array underneath (no copy)."""
        return self.data

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype, copy=False)

    def __getitem__(self, index):
        return Tensor.from_numpy(self.data[index])

    def __setitem__(self, index, value):
        self.data[index] = value.data if isinstance(value, Tensor) else value

    # ---- in-place updates ---------------------------------------------------------------------------
    def fill(self, value) -> "Tensor":
        """Set every element to `value`, or copy the values of an array of the same size in row-major order."""
        if np.ndim(value) == 0:
            self.data.fill(value)
        else:
            values = np.asarray(value, dtype=self.dtype)
            if values.size != self.size:
                raise ValueError(f"fill needs {self.size} values, got {values.size}")
            self.data[...] = values.reshape(self.shape)
        return self

    def transform(self, fn) -> "Tensor":
        """Apply an element-wise function in place, e.g. `t.transform(np.exp)`."""
        self.data[...] = fn(self.data)
        return self

    # ---- new shapes ---------------------------------------------------------------------------------
    def reshape(self, *shape) -> "Tensor":
        """Same elements in row-major order, new shape; a view whenever numpy can make one."""
        return Tensor.from_numpy(self.data.reshape(normalize_shape(shape)))

    def flatten(self) -> "Tensor":
        """A rank-1 tensor of all elements (row-major)."""
        return self.reshape(-1)

    def padding(self, pads, value: float = 0.0) -> "Tensor":
        """A new tensor with `pads = (top, bottom, left, right)` rows/cols of `value` around each plane."""
        top, bottom, left, right = pads
        widths = [(0, 0)] * (self.ndim - 2) + [(top, bottom), (left, right)]
        return Tensor.from_numpy(np.pad(self.data, widths, constant_values=value))

    # ---- element-wise arithmetic (numpy broadcasting rules) ----------------------------------------
    def _binary(self, other, op) -> "Tensor":
        other = other.data if isinstance(other, Tensor) else other
        return Tensor.from_numpy(op(self.data, other))

    def __add__(self, other):
        return self._binary(other, np.add)

    def __sub__(self, other):
        return self._binary(other, np.subtract)

    def __mul__(self, other):
        return self._binary(other, np.multiply)

    def __truediv__(self, other):
        return self._binary(other, np.divide)

    # `2 - t` and `1 / t` land here: the operands swap places, so the order of subtract and divide flips back
    def __rsub__(self, other):
        return self._binary(other, lambda mine, theirs: np.subtract(theirs, mine))

    def __rtruediv__(self, other):
        return self._binary(other, lambda mine, theirs: np.divide(theirs, mine))

    __radd__ = __add__
    __rmul__ = __mul__

    def __neg__(self):
        return Tensor.from_numpy(-self.data)

    def __eq__(self, other):
        other = other.data if isinstance(other, Tensor) else other
        return bool(np.array_equal(self.data, other))

    __hash__ = None

    def __repr__(self):
        return f"Tensor(shape={self.shape}, dtype={self.dtype})"


def normalize_shape(shape: tuple) -> tuple:
    """Accept both `f(2, 3)` and `f((2, 3))`."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)
