"""The layer registry: PNNX type string -> Layer class."""

from __future__ import annotations

from kuiper.core.errors import UnsupportedOperatorError

_LAYERS: dict = {}


def register(*pnnx_types: str):
    """Class decorator: `@register("nn.ReLU", "F.relu")` makes the class the layer for those types."""

    def add(cls):
        for t in pnnx_types:
            if t in _LAYERS and _LAYERS[t] is not cls:
                raise ValueError(f"PNNX type {t!r} is already registered to {_LAYERS[t].__name__}")
            _LAYERS[t] = cls
        return cls

    return add


def layer_class(pnnx_type: str, op_name: str = "?"):
    cls = _LAYERS.get(pnnx_type)
    if cls is None:
        raise UnsupportedOperatorError(f"no layer is registered for type '{pnnx_type}' (operator '{op_name}')")
    return cls


def is_supported(pnnx_type: str) -> bool:
    return pnnx_type in _LAYERS


def registered_types() -> list:
    return sorted(_LAYERS)


def unregister(*pnnx_types: str) -> None:
    """Forget the layers of these types (the registry is global: examples and tests tidy up with this)."""
    for t in pnnx_types:
        _LAYERS.pop(t, None)
