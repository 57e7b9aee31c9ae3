"""The Layer interface every operator implementation follows.

A layer is created once per operator when the graph is built. Its constructor reads and checks the
operator's parameters and weights (raising LayerError), so that forward does no validation at all; a
parameter it never reads is refused too (`check_params_read`), since the layer would silently ignore it.
Then, for every input shape the graph meets, `output_shapes` infers the output shapes, and the graph
allocates the outputs before calling `forward_numpy(inputs, outputs)`, which fills them in place.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.errors import LayerError, ShapeError
from kuiper.pnnx.records import text_to_float

_REQUIRED = object()
#: pnnx's own reader and writer keep ints in C ints: a value past 32 bits is corrupt, and numpy's index
#: arithmetic would overflow on it
INT_RANGE = range(-2**31, 2**31)


def _number(value):
    """pnnx types `inf`, `-inf` and `nan` as strings; read them as the floats they stand for."""
    if isinstance(value, str):
        number = text_to_float(value)
        return value if number is None else number
    return value


class Layer:
    """Base class: typed access to the operator's parameters and weights, plus the forward contract."""

    #: how many input tensors the layer takes; None means "at least min_inputs"
    num_inputs: int | None = 1
    min_inputs: int = 1
    #: the ways to compute this layer, one chosen per input shape (kuiper/core/variants.py): set by build_opencl in
    #: layers with several OpenCL kernels, by the constructor of fast CPU layers with several paths; None: one way
    variants = None
    #: True where the work buffers (workspace_bytes) stay allocated between forwards, as the fast CPU layers'
    #: scratch does; the reference layers' are temporaries, gone when forward returns
    keeps_workspace = False
    #: parameters pnnx writes for this type that change nothing at inference, which the layer need not read
    harmless_params: frozenset = frozenset()

    def __init__(self, op):
        self.op = op
        self._read = set()  # the parameter keys asked for, known or not
        given = len(op.input_operands)
        if self.num_inputs is None and given < self.min_inputs:
            raise self.error(f"expects at least {self.min_inputs} input(s), the graph gives {given}")
        if self.num_inputs is not None and given != self.num_inputs:
            raise self.error(f"expects {self.num_inputs} input(s), the graph gives {given}")

    # ---- errors -----------------------------------------------------------------------------------
    def error(self, message: str) -> LayerError:
        return LayerError(f"{self.op.type} operator '{self.op.name}': {message}")

    def shape_error(self, message: str) -> ShapeError:
        return ShapeError(f"{self.op.type} operator '{self.op.name}': {message}")

    # ---- parameters -------------------------------------------------------------------------------
    def param(self, key: str, default=_REQUIRED):
        """The typed value of parameter `key` (None for a null value); `default` when absent."""
        self._read.add(key)
        p = self.op.params.get(key)
        if p is None:
            if default is _REQUIRED:
                raise self.error(f"missing parameter '{key}'")
            return default
        return p.value

    def int_param(self, key: str, default=_REQUIRED) -> int:
        value = self.param(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"parameter '{key}' must be an int, got {value!r}")
        return self._int32(key, value)

    def float_param(self, key: str, default=_REQUIRED, finite: bool = True) -> float:
        """A number; `finite=False` admits inf and -inf where they mean something (an open bound)."""
        value = _number(self.param(key, default))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"parameter '{key}' must be a number, got {value!r}")
        return self._real(key, value, finite)

    def bool_param(self, key: str, default=_REQUIRED) -> bool:
        value = self.param(key, default)
        if not isinstance(value, bool):
            raise self.error(f"parameter '{key}' must be True or False, got {value!r}")
        return value

    def str_param(self, key: str, default=_REQUIRED, choices=None) -> str:
        value = self.param(key, default)
        if not isinstance(value, str):
            raise self.error(f"parameter '{key}' must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(f"parameter '{key}'={value} is not supported (supported: {', '.join(choices)})")
        return value

    def ints_param(self, key: str, n: int | None = None, default=_REQUIRED) -> tuple:
        """An int list parameter; a single int is repeated n times (PyTorch's `kernel_size=3` style)."""
        value = self.param(key, default)
        if isinstance(value, int) and not isinstance(value, bool) and n is not None:
            value = [value] * n
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(f"parameter '{key}' must be a list of ints, got {value!r}")
        if n is not None and len(value) != n:
            raise self.error(f"parameter '{key}' must have {n} values, got {len(value)}")
        return tuple(self._int32(key, v) for v in value)

    def _int32(self, key: str, value: int) -> int:
        if value not in INT_RANGE:
            raise self.error(f"parameter '{key}' is out of range: {value} does not fit in 32 bits")
        return value

    def floats_param(self, key: str, n: int | None = None, default=_REQUIRED, finite: bool = True) -> tuple:
        """A list of numbers (a single number is repeated n times); `finite` as for float_param."""
        value = self.param(key, default)
        value = [_number(v) for v in value] if isinstance(value, (list, tuple)) else _number(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and n is not None:
            value = [value] * n
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        ):
            raise self.error(f"parameter '{key}' must be a list of numbers, got {value!r}")
        if n is not None and len(value) != n:
            raise self.error(f"parameter '{key}' must have {n} values, got {len(value)}")
        return tuple(self._real(key, v, finite) for v in value)

    def _real(self, key: str, value, finite: bool) -> float:
        """`value` as a float, refused when nan (a parameter it never makes sense as), infinite unless `finite`
        is off, or an int past a float's range."""
        try:
            number = float(value)
        except OverflowError:
            raise self.error(f"parameter '{key}' is out of range: {value}") from None
        if math.isnan(number) or (finite and math.isinf(number)):
            raise self.error(f"parameter '{key}' must be {'finite' if finite else 'a number, not nan'}, got {value}")
        return number

    def check_params_read(self) -> None:
        """Refuse the operator's parameters that the constructor never read (nor `harmless_params` names): a
        misspelt or corrupt key, or an option this layer does not implement, would otherwise be ignored."""
        unread = self.unread_params()
        if unread:
            known = ", ".join(sorted(self._read)) or "none"
            raise self.error(f"unknown parameter(s) {', '.join(unread)} (this layer reads: {known})")

    def unread_params(self) -> list:
        return [key for key in self.op.params if key not in self._read and key not in self.harmless_params]

    # ---- weights ----------------------------------------------------------------------------------
    def weight(self, key: str, shape: tuple | None = None, required: bool = True) -> np.ndarray | None:
        """Attribute `key` as a float32 array (a zero-copy view when the file stores f32)."""
        attr = self.op.attrs.get(key)
        if attr is None:
            if required:
                raise self.error(f"missing weight '@{key}'")
            return None
        array = attr.numpy()
        if array.dtype != np.float32:
            array = array.astype(np.float32)
        if shape is not None and tuple(array.shape) != tuple(shape):
            raise self.error(f"weight '@{key}' has shape {tuple(array.shape)}, expected {tuple(shape)}")
        return array

    # ---- the forward contract ---------------------------------------------------------------------
    def input_shape(self, index: int = 0) -> tuple | None:
        """The shape recorded for input `index` in the .param file (None where it was not recorded)."""
        return self.op.input_operands[index].shape

    def output_shapes(self, input_shapes: list) -> list:
        """Shape inference: the output shapes for these input shapes. Raise ShapeError when they do not fit."""
        raise NotImplementedError(f"{type(self).__name__} must implement output_shapes")

    def output_dtypes(self, input_dtypes: list) -> list:
        """Output dtypes; most layers keep the dtype of their first input."""
        return [input_dtypes[0] if input_dtypes else np.dtype(np.float32)] * len(self.op.output_operands)

    def rows_written(self, rows: int) -> tuple:
        """(first, count): the rows of its output a forward writes, of `rows` (every axis but the last folded):
        all of them, unless the layer computes some alone (Linear's last_row_only and gather_rows). A backend then
        reads back those alone."""
        return 0, rows

    def workspace_bytes(self, input_shapes: list) -> int:
        """Bytes of work buffers forward_numpy allocates at these input shapes besides its outputs, which the
        graph counts against its memory limit with the plan. Layers whose temporaries stay near their output's
        size leave it at 0."""
        return 0

    def macs(self, input_shapes: list, output_shapes: list) -> int:
        """Multiply-accumulate operations for one forward at these shapes (for `kuiper inspect`).

        Layers whose cost is dominated by arithmetic (convolution, linear) override this; cheap
        element-wise and data-movement layers count as zero, as pnnx's own FLOPS report does.
        """
        return 0

    def forward_numpy(self, inputs: list, outputs: list) -> None:
        """Compute outputs (preallocated numpy arrays, filled in place) from the input arrays."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward_numpy")

    def run_numpy(self, *inputs: np.ndarray) -> list:
        """Run this layer alone: infer output shapes, allocate the outputs, call forward_numpy.

        This is what the graph does for every operator; lessons and tests use it to try one layer.
        """
        inputs = [np.ascontiguousarray(x) for x in inputs]
        shapes = self.output_shapes([tuple(x.shape) for x in inputs])
        dtypes = self.output_dtypes([x.dtype for x in inputs])
        outputs = [np.empty(s, dtype=d) for s, d in zip(shapes, dtypes)]
        self.forward_numpy(inputs, outputs)
        return outputs
