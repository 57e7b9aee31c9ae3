"""Lesson 20: Transformers. Reference solutions."""

import numpy as np


def layer_norm(x, dims: int, weight=None, bias=None, eps: float = 1e-5):
    """Layer normalisation of `x` over its last `dims` dimensions: each slice's mean and biased variance
    (divided by n), computed in two passes (the variance from the centred values), y = (x - mean) /
    sqrt(var + eps), then times `weight` and plus `bias` (each of the normalised dimensions' shape) when given.
    Returns float32. See course_notes/20-transformers.md, exercise 1."""
    axes = tuple(range(x.ndim - dims, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    centred = x - mean
    var = (centred * centred).mean(axis=axes, keepdims=True)
    y = centred / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(np.float32)


def attention(q, k, v, mask=None, is_causal: bool = False):
    """Scaled dot-product attention, as F.scaled_dot_product_attention: softmax(q kᵀ / sqrt(D) + mask) v over
    the last two dimensions of q (..., L, D), k (..., S, D) and v (..., S, Dv), broadcasting the leading ones.
    A boolean mask says which keys take part (True) and a float mask is added; is_causal lets query i see keys
    0..i only (aligned to the top left when L != S). A query that may see no key gets zeros. Returns float32.
    See course_notes/20-transformers.md, exercise 6."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    allowed = np.ones(scores.shape[-2:], bool)
    if is_causal:
        allowed = np.tril(allowed)
    if mask is not None and np.asarray(mask).dtype == bool:
        allowed = allowed & mask
    elif mask is not None:
        scores = scores + mask
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(top)
    weights = np.exp(scores - np.where(empty, 0.0, top))
    total = weights.sum(axis=-1, keepdims=True)
    weights = np.where(empty, 0.0, weights / np.where(empty, 1.0, total))
    return (weights @ v).astype(np.float32)
