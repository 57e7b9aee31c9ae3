"""The OpenCL layers: PNNX type string -> the class the opencl backend uses instead of the reference one.

An OpenCL class subclasses the reference layer of kuiper/layers/ and kuiper/opencl/layer.py's mixin, and adds
`build_opencl` and `forward_opencl`. Types without one run their reference forward on the host, the OpenCL
executor copying their inputs down and their outputs up (and saying so once per graph).
"""

from __future__ import annotations

_OPENCL: dict = {}


def opencl(*pnnx_types: str):
    """Class decorator: `@opencl("nn.Conv2d")` makes the class the opencl backend's layer for those types."""

    def add(cls):
        for t in pnnx_types:
            _OPENCL[t] = cls
        return cls

    return add


def opencl_class(pnnx_type: str):
    """The OpenCL class for `pnnx_type`, or None when only the reference layer exists."""
    return _OPENCL.get(pnnx_type)
