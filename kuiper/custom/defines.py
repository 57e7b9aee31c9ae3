"""The `-D` options a custom kernel is compiled with.

Two kinds, fixed at different times:
  parameter defines   from the operator's parameters, once per operator:  -DLO=(-0.5f)  -DPADS={1,1}
  shape defines       from the tensors' shapes and the work sizes, once per input shape signature:
                      -DINPUT0_DIMS_C=4  -DOUTPUT0_SIZE=120  -DGLOBAL_WORKSIZE={120} ...

The list of automatic names is in course_notes/18-custom-opencl-operator.md.
"""

from __future__ import annotations

import math
import re

import numpy as np

from kuiper.custom.formula import DIMS, nchw

#: names the automatic defines use: a parameter's define may not take one of them
RESERVED = re.compile(r"(INPUT|OUTPUT)\d+_\w+|NUM_INPUTS|NUM_OUTPUTS|GLOBAL_WORKSIZE|LOCAL_WORKSIZE")

C_TYPES = {
    np.dtype(np.float32): "float", np.dtype(np.float16): "half", np.dtype(np.float64): "double",
    np.dtype(np.int8): "char", np.dtype(np.uint8): "uchar", np.dtype(np.int16): "short",
    np.dtype(np.int32): "int", np.dtype(np.int64): "long",
}


def _float(value: float) -> str:
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = f"{float(value)!r}f"  # repr keeps every digit and always has a '.' or an exponent
    return f"({text})" if value < 0 else text


def _int(value: int) -> str:
    return f"({value})" if value < 0 else str(value)


def _list(items) -> str:
    return "{" + ",".join(items) + "}"


def literal(value, type: str) -> str:
    """The C text of a parameter value of config type int, float, int[] or float[]. Negative scalars are
    parenthesised so that `x-LO` cannot turn into `x--0.5f`."""
    if type == "int":
        return _int(value)
    if type == "float":
        return _float(value)
    return _list(literal(v, type[:-2]) for v in value)


def param_defines(items) -> list:
    """-D options for [(define name, config type, value)]; a list also gets NAME_LEN, its length."""
    options = []
    for name, type, value in items:
        options.append(f"-D{name}={literal(value, type)}")
        if type.endswith("[]"):
            options.append(f"-D{name}_LEN={len(value)}")
    return options


def tensor_defines(prefix: str, shape, dtype) -> list:
    """PREFIX_TYPE, _RANK, _SIZE, _DIMS {N,C,H,W} and _DIMS_N.._W, _PITCHES (element strides of the
    contiguous NCHW layout) and _PITCH_N.._W, for one tensor of rank 1 to 4."""
    dtype = np.dtype(dtype)
    if dtype not in C_TYPES:
        raise ValueError(f"{prefix} has dtype {dtype}, which custom kernels do not take")
    dims = nchw(shape)
    pitches, stride = {}, 1
    for d in reversed(DIMS):
        pitches[d] = stride
        stride *= dims[d]
    options = [f"-D{prefix}_TYPE={C_TYPES[dtype]}", f"-D{prefix}_RANK={len(shape)}", f"-D{prefix}_SIZE={stride}",
               f"-D{prefix}_DIMS={_list(str(dims[d]) for d in DIMS)}",
               f"-D{prefix}_PITCHES={_list(str(pitches[d]) for d in DIMS)}"]
    options += [f"-D{prefix}_DIMS_{d}={dims[d]}" for d in DIMS]
    options += [f"-D{prefix}_PITCH_{d}={pitches[d]}" for d in DIMS]
    return options


def shape_defines(inputs, outputs, global_size, local_size) -> list:
    """The automatic defines for one shape signature: inputs and outputs as [(shape, dtype)]."""
    options = [f"-DNUM_INPUTS={len(inputs)}", f"-DNUM_OUTPUTS={len(outputs)}"]
    for prefix, tensors in (("INPUT", inputs), ("OUTPUT", outputs)):
        for k, (shape, dtype) in enumerate(tensors):
            options += tensor_defines(f"{prefix}{k}", shape, dtype)
    options.append(f"-DGLOBAL_WORKSIZE={_list(map(str, global_size))}")
    if local_size is not None:
        options.append(f"-DLOCAL_WORKSIZE={_list(map(str, local_size))}")
    return options
