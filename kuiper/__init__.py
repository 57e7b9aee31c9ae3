"""kuiper: a PNNX inference engine on numpy and OpenCL, written to be read."""

from kuiper.core.errors import (
    BackendError,
    CheckpointError,
    ConfigError,
    CustomOpError,
    ExportError,
    GraphError,
    ImageError,
    InputError,
    KernelBuildError,
    KuiperError,
    KuiperWarning,
    LayerError,
    MemoryLimitError,
    PnnxFormatError,
    ShapeError,
    UnsupportedOperatorError,
)
from kuiper import pnnx
from kuiper.core.tensor import Tensor
from kuiper import layers  # noqa: F401  (registers every layer)
from kuiper.runtime import GraphState, RuntimeGraph, load
from kuiper import cpu  # noqa: F401  (registers the fast CPU layers)
from kuiper.cpu.threads import num_threads, set_num_threads
from kuiper import llm  # noqa: F401  (kuiper.llm.load; its packages load with a model)

__version__ = "0.1.0"

__all__ = [
    "BackendError", "CheckpointError", "ConfigError", "CustomOpError", "ExportError", "GraphError", "ImageError",
    "InputError", "KernelBuildError", "KuiperError", "LayerError", "MemoryLimitError", "PnnxFormatError", "ShapeError",
    "UnsupportedOperatorError", "GraphState", "KuiperWarning", "RuntimeGraph", "Tensor", "llm", "load",
    "num_threads", "pnnx", "set_num_threads",
]
