"""Lesson 12: ResNet-18 end to end. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 12`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import math
from pathlib import Path
import numpy as np


def parameter_count(param_path) -> int:
    """How many weight values the model has, from its .param file alone: the product of every `@` attribute
    shape, "@weight=(64,3,7,7)f32" counting 64·3·7·7. No .bin is read. See course_notes/12-resnet18.md,
    exercise 6."""
    raise NotImplementedError('lesson 12: write parameter_count() in exercises/lesson_12.py; '
                              'see course_notes/12-resnet18.md, exercise 6')


def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps):
    """The weight and bias of one convolution that computes BatchNorm(conv(x)) at inference, as pnnx folds
    them: each output channel's weights and bias scaled by gamma / sqrt(var + eps), and the bias shifted by
    beta - mean · gamma / sqrt(var + eps). `bias` may be None (a convolution without one). Returns
    (weight, bias) as float32. See course_notes/12-resnet18.md, exercise 4."""
    raise NotImplementedError('lesson 12: write fold_batchnorm() in exercises/lesson_12.py; '
                              'see course_notes/12-resnet18.md, exercise 4')
