"""The folders kuiper reads at run time besides its code: the OpenCL kernels (cl/) and the embedded models
(models/). They sit at the top of a checkout; an install carries them inside the package (setup.py maps them
to kuiper.cl and kuiper.models). An editable install runs the checkout's package, which has no such copy."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the kuiper package


def shipped(name: str) -> Path:
    """The folder `name` ("cl" or "models"): the package's copy in an install, else the checkout's."""
    installed = PACKAGE / name
    return installed if installed.is_dir() else PACKAGE.parent / name
