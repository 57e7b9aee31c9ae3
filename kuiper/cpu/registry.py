"""The fast CPU layers: PNNX type string -> the class the numpy backend uses instead of the reference one.

A fast class subclasses the reference layer of kuiper/layers/ (its checks, shapes and OpenCL forward stay the
same) and overrides `forward_numpy`, as ncnn's per-architecture layers override the plain one. Types without
one run the reference forward on every backend. The element-wise activations share one fast forward, so
their fast classes are made here on demand rather than registered one by one (kuiper/cpu/elementwise.py).
"""

from __future__ import annotations

from kuiper.cpu.elementwise import BlockedElementwise
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import is_supported, layer_class

_FAST: dict = {}
_BLOCKED: dict = {}  # reference ElementwiseLayer class -> its blocked subclass, made on first use


def fast(*pnnx_types: str):
    """Class decorator: `@fast("nn.Conv2d")` makes the class the numpy backend's layer for those types."""

    def add(cls):
        for t in pnnx_types:
            _FAST[t] = cls
        return cls

    return add


def fast_class(pnnx_type: str):
    """The fast class for `pnnx_type`, or None when the reference layer is all there is."""
    if pnnx_type in _FAST or not is_supported(pnnx_type):
        return _FAST.get(pnnx_type)
    cls = layer_class(pnnx_type)
    # an activation that only defines `apply` (one with a forward of its own is left as it is); keyed by the
    # class, not the type, so that a type registered anew gets a fast class of its new layer
    if not issubclass(cls, ElementwiseLayer) or cls.forward_numpy is not ElementwiseLayer.forward_numpy:
        return None
    if cls not in _BLOCKED:
        _BLOCKED[cls] = type(f"Fast{cls.__name__}", (BlockedElementwise, cls), {})
    return _BLOCKED[cls]
