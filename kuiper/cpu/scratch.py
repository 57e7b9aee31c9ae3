"""Work buffers that fast CPU layers keep from one forward to the next, so that a forward allocates nothing."""

from __future__ import annotations

import math

import numpy as np


class Scratch:
    """Work buffers by name, reallocated only when the shape they need changes (a layer that has one sets
    Layer.keeps_workspace).

    New buffers are zero-filled, so a buffer whose border is never written keeps a zero border for free.
    """

    def __init__(self):
        self._buffers = {}

    def get(self, name: str, shape: tuple) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape != shape:
            buffer = self._buffers[name] = np.zeros(shape, dtype=np.float32)
        return buffer


class KeepsScratch:
    """A fast layer whose work buffers stay in `scratch` between forwards; Layer.keeps_workspace tells the memory
    planner to count them (workspace_bytes). Put it first in the bases."""

    keeps_workspace = True

    def __init__(self, op):
        super().__init__(op)
        self.scratch = Scratch()


def view(buffer: np.ndarray, *shape) -> np.ndarray:
    """The first prod(shape) elements of a flat work buffer, shaped."""
    return buffer[:math.prod(shape)].reshape(shape)  # math.prod: np.prod's per-call cost adds up over a forward
