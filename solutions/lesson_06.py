"""Lesson 6: Layers and the registry. Reference solutions."""

import numpy as np

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register


@register("course.Softplus")
class Softplus(ElementwiseLayer):
    """softplus(x) = log(1 + e^(beta·x)) / beta, an activation registered as the type "course.Softplus".
    See course_notes/06-layers.md, exercises 1 and 2."""

    def __init__(self, op):
        """Read the parameter `beta` (default 1.0; an int such as 2 must work too) into self.beta, and refuse
        beta <= 0 with `raise self.error(...)`. See course_notes/06-layers.md, exercise 2."""
        super().__init__(op)
        self.beta = self.float_param("beta", 1.0)
        if self.beta <= 0:
            raise self.error(f"beta must be positive, got {self.beta}")

    def apply(self, x, out):
        """Write softplus(x) into `out`, without overflow for any float32 x (no inf or warning at x = ±100):
        log(1 + e^y) = max(y, 0) + log(1 + e^(-|y|)), and np.log1p computes log(1 + small) accurately.
        See course_notes/06-layers.md, exercise 1."""
        y = x * np.float32(self.beta)
        np.log1p(np.exp(-np.abs(y)), out=out)
        out += np.maximum(y, 0)
        out /= np.float32(self.beta)
