"""Which layer class serves a PNNX type on each backend: the reference layer (kuiper/layers/), or where the
backend has one, its own subclass of it (kuiper/cpu/ for numpy, kuiper/opencl/ for opencl)."""

from __future__ import annotations

from kuiper.cpu.registry import fast_class
from kuiper.layers.registry import layer_class
from kuiper.opencl.registry import opencl_class
from kuiper.core.operators import make_operator

#: backend name -> its registry of subclasses (None: the reference layers only)
_OWN = {"numpy": fast_class, "reference": None, "opencl": opencl_class}
BACKENDS = tuple(_OWN)


def backend_class(pnnx_type: str, backend: str, op_name: str = "?"):
    """The class that runs `pnnx_type` on `backend`."""
    own = _OWN[backend]
    return (own and own(pnnx_type)) or layer_class(pnnx_type, op_name)


def make_layer(type: str, backend: str = "reference", **kwargs):
    """Create the layer for `type` that `backend` runs, on a hand-made operator (see make_operator): how tests
    and lessons try one layer."""
    op = make_operator(type, **kwargs)
    op.layer = backend_class(type, backend, op.name)(op)
    op.layer.check_params_read()
    return op.layer
