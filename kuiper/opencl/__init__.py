"""OpenCL: the devices (devices.py), the runtime every OpenCL layer enqueues through (runtime.py, enqueuer.py),
forwards replayed from a recording (replay.py), the shared GEMM launcher (gemm.py) and kernel variants chosen by
measurement (tuning.py). Kernels live in cl/."""

from kuiper.opencl.devices import (
    all_devices, describe, expose_pip_drivers, probe, select_device, spec_of, usable_devices,
)
from kuiper.opencl.runtime import BufferPool, DeviceTensor, OpenCLRuntime, get_runtime, round_up
from kuiper.opencl.enqueuer import Enqueuer

__all__ = [
    "BufferPool", "DeviceTensor", "Enqueuer", "OpenCLRuntime", "all_devices", "describe", "expose_pip_drivers",
    "get_runtime", "probe", "round_up", "select_device", "spec_of", "usable_devices",
]

# the OpenCL layers, registered by PNNX type (registry.py): imported last, since they build on the runtime
from kuiper.opencl import (  # noqa: E402,F401
    activations, adaptive_pool, arange, aten, attention, attribute, batchnorm2d, cached_attention, cat, conv1d,
    conv2d, conv_transpose2d, copy_chain, embedding, expand, expression, fused, int8_linear, layer_norm, linear,
    matmul, multihead_attention, pad, permute, pooling, reduce, reshape, rms_norm, roll, rotary, shuffle, slice,
    softmax, split, stack, transpose, unfold, upsample,
)
