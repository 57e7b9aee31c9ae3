"""Lesson 12: ResNet-18 end to end. Reference solutions."""

import math
from pathlib import Path

import numpy as np


def parameter_count(param_path) -> int:
    """How many weight values the model has, from its .param file alone: the product of every `@` attribute
    shape, "@weight=(64,3,7,7)f32" counting 64·3·7·7. No .bin is read. See course_notes/12-resnet18.md,
    exercise 6."""
    total = 0
    for line in Path(param_path).read_text().splitlines()[2:]:
        for token in line.split():
            if token.startswith("@"):
                shape = token.split("=", 1)[1]
                total += math.prod(int(d) for d in shape[1:shape.index(")")].split(",") if d)
    return total


def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps):
    """The weight and bias of one convolution that computes BatchNorm(conv(x)) at inference, as pnnx folds
    them: each output channel's weights and bias scaled by gamma / sqrt(var + eps), and the bias shifted by
    beta - mean · gamma / sqrt(var + eps). `bias` may be None (a convolution without one). Returns
    (weight, bias) as float32. See course_notes/12-resnet18.md, exercise 4."""
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    bias = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
    folded_weight = weight.astype(np.float64) * scale.reshape(-1, *[1] * (weight.ndim - 1))
    folded_bias = (bias - mean) * scale + beta
    return folded_weight.astype(np.float32), folded_bias.astype(np.float32)
