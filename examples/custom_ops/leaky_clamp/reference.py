"""The numpy twin of leaky_clamp.cl: what the numpy backend runs, and what the kernel is tested against."""

import numpy as np


def leaky_clamp(inputs, weights, params):
    x = inputs[0]
    clamped = np.clip(x, params["min_val"], params["max_val"])
    if params["slope"] == 0.0:
        return clamped
    return clamped + np.float32(params["slope"]) * (x - clamped)
