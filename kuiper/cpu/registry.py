"""The fast CPU layers: PNNX type string -> the class the numpy backend uses instead of the reference one.

A fast class subclasses the reference layer of kuiper/layers/ (its checks, shapes and OpenCL forward stay the
same) and overrides `forward_numpy`, as ncnn's per-architecture layers override the plain one. Types without
one run the reference forward on every backend.
"""

from __future__ import annotations

_FAST: dict = {}


def fast(*pnnx_types: str):
    """Class decorator: `@fast("nn.Conv2d")` makes the class the numpy backend's layer for those types."""

    def add(cls):
        for t in pnnx_types:
            _FAST[t] = cls
        return cls

    return add


def fast_class(pnnx_type: str):
    """The fast class for `pnnx_type`, or None when the reference layer is all there is."""
    return _FAST.get(pnnx_type)
