"""Lesson 20: Transformers. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 20`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

import numpy as np


def layer_norm(x, dims: int, weight=None, bias=None, eps: float = 1e-5):
    """Layer normalisation of `x` over its last `dims` dimensions: each slice's mean and biased variance
    (divided by n), computed in two passes (the variance from the centred values), y = (x - mean) /
    sqrt(var + eps), then times `weight` and plus `bias` (each of the normalised dimensions' shape) when given.
    Returns float32. See course_notes/20-transformers.md, exercise 1."""
    raise NotImplementedError('lesson 20: write layer_norm() in exercises/lesson_20.py; '
                              'see course_notes/20-transformers.md, exercise 1')


def attention(q, k, v, mask=None, is_causal: bool = False):
    """Scaled dot-product attention, as F.scaled_dot_product_attention: softmax(q kᵀ / sqrt(D) + mask) v over
    the last two dimensions of q (..., L, D), k (..., S, D) and v (..., S, Dv), broadcasting the leading ones.
    A boolean mask says which keys take part (True) and a float mask is added; is_causal lets query i see keys
    0..i only (aligned to the top left when L != S). A query that may see no key gets zeros. Returns float32.
    See course_notes/20-transformers.md, exercise 6."""
    raise NotImplementedError('lesson 20: write attention() in exercises/lesson_20.py; '
                              'see course_notes/20-transformers.md, exercise 6')
