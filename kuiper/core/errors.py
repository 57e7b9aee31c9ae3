"""The exception types kuiper raises. Every error a user can cause is one of these."""


class KuiperError(Exception):
    """Base class of every error kuiper raises on purpose."""


class KuiperWarning(UserWarning):
    """Something kuiper fixed for you but you may want to know about (e.g. a float64 input converted)."""


class PnnxFormatError(KuiperError, ValueError):
    """A .pnnx.param or .pnnx.bin file is malformed; the message names the file and line or member."""


class GraphError(KuiperError):
    """The graph cannot be built or run (wrong state, cycle, operator that never becomes ready)."""


class UnsupportedOperatorError(GraphError):
    """No layer is registered for an operator's PNNX type."""


class LayerError(GraphError, ValueError):
    """An operator's parameters or weights are not valid for its layer."""


class ShapeError(GraphError, ValueError):
    """Shapes do not agree (shape inference failed or a shape is ambiguous)."""


class MemoryLimitError(GraphError, MemoryError):
    """A plan for these input shapes would need more memory than the graph's memory limit allows; the message
    names the operator with the largest output, its shape and the bytes. Raised before anything is allocated."""


class ConfigError(KuiperError, ValueError):
    """An option or environment variable has a value kuiper cannot use (the message names it)."""


class InputError(KuiperError, ValueError):
    """The arrays given to forward do not fit the graph's inputs."""


class BackendError(KuiperError):
    """A backend is unknown or cannot be used on this machine."""


class KernelBuildError(BackendError):
    """An OpenCL program failed to build; carries the file, options and build log."""

    def __init__(self, message, *, file=None, options=None, log=""):
        super().__init__(message)
        self.file = file
        self.options = options
        self.log = log


class CustomOpError(KuiperError):
    """A custom operator (a kernel file plus its TOML config) is not valid; the message names the config
    file and the key at fault."""


class ImageError(KuiperError, ValueError):
    """An image cannot be read, or a folder holds none; the message names the file or folder."""


class CheckpointError(KuiperError, ValueError):
    """A language model's checkpoint directory cannot be used (kuiper/llm/): a file missing or malformed, a key
    of config.json unsupported, a tensor missing or of the wrong shape or dtype; the message names the file and
    the key or tensor, in one line."""


class ExportError(KuiperError):
    """A model cannot be built or exported to PNNX (unknown name, missing factory, pnnx failing); the message
    says which, in one line."""
