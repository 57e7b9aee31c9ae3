"""kuiper: a PNNX inference engine on numpy and OpenCL, written to be read."""

from kuiper.errors import (
    BackendError,
    GraphError,
    InputError,
    KernelBuildError,
    KuiperError,
    LayerError,
    PnnxFormatError,
    ShapeError,
    UnsupportedOperatorError,
)
from kuiper import pnnx

__version__ = "0.1.0"

__all__ = [
    "BackendError", "GraphError", "InputError", "KernelBuildError", "KuiperError", "LayerError",
    "PnnxFormatError", "ShapeError", "UnsupportedOperatorError", "pnnx",
]
