"""Attention: each query position takes a mean of the values, weighted by how well its query matches each key:

    out = softmax(q k^T * scale + mask) v        q (L, D), k (S, D), v (S, Dv) -> out (L, Dv)

the softmax running along each row, over the S keys. F.scaled_dot_product_attention (SDPA) is exactly that,
over any leading batch dims, with scale 1/sqrt(D) unless given. nn.MultiheadAttention (MHA) wraps it: the
query, key and value inputs are first projected to embed_dim by learned weights (in_proj); the embedding is
split into num_heads heads of head_dim = embed_dim / num_heads, each head attends on its own with scale
1/sqrt(head_dim), and the heads, joined again, go through one more projection (out_proj).

A float mask is added to the scores, -inf forbidding a position. A boolean mask forbids positions too, but
the two operators read it oppositely, as PyTorch does: for MHA True means "masked out", for SDPA True means
"takes part". SDPA's is_causal lets query i see keys 0..i only. A row whose every key is forbidden has no
softmax; PyTorch's SDPA (and MHA without the weights output, which runs on it) gives zeros there, MHA's own
softmax (with the weights output) gives NaN, and so does this layer in each case.

What pnnx writes for SDPA (checked with pnnx 20261020 against torch 2.13): inputs $query, $key, $value[,
$attn_mask] (any broadcastable shape), dropout_p, is_causal, and scale and enable_gqa when given (grouped-query
attention: key and value have fewer heads, each shared by consecutive query heads; a single key head is
broadcast without it). MHA, with what pnnx writes
for it, is kuiper/layers/multihead_attention.py. The OpenCL forwards are kuiper/opencl/attention.py (SDPA and
what both share) and kuiper/opencl/multihead_attention.py.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

#: how a mask reads (cl/attention.cl takes the same numbers): none, added, boolean True = masked out (MHA),
#: boolean True = takes part (SDPA)
NO_MASK, ADDED_MASK, TRUE_MASKS, TRUE_ALLOWS = range(4)


def softmax_rows(scores: np.ndarray, empty_rows_zero: bool, ones: np.ndarray | None = None) -> None:
    """Softmax along the last axis, in place. A row of -inf alone has no largest element to subtract: it becomes
    zeros with `empty_rows_zero`, else NaN (0 / 0), as PyTorch's SDPA and its plain softmax give. `ones`, a
    column of ones, sums the rows as a matrix product instead (faster than numpy's sum along short rows)."""
    top = scores.max(axis=-1, keepdims=True)
    top[top == -np.inf] = 0
    scores -= top
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True) if ones is None else scores @ ones
    if empty_rows_zero:
        total[total == 0] = np.inf
    with np.errstate(invalid="ignore"):
        scores /= total


def additive(mask: np.ndarray, mode: int) -> np.ndarray:
    """The mask as a float32 array to add to the scores (-inf where a position is forbidden)."""
    if mode == ADDED_MASK:
        return mask
    forbidden = mask if mode == TRUE_MASKS else ~mask
    return np.where(forbidden, np.float32(-np.inf), np.float32(0))


class Attention(Layer):
    """What MHA and SDPA share: the attention itself."""

    num_inputs = None
    #: how a boolean mask reads (TRUE_MASKS or TRUE_ALLOWS)
    bool_mask: int
    #: whether a row with every key masked gives zeros (else NaN)
    empty_rows_zero = True

    def named_slots(self, names: tuple) -> list:
        """The `$name` pnnx wrote for each input slot ('' where none), each checked to be one of `names`."""
        given = list(self.op.input_names) or [""] * len(self.op.input_operands)
        unknown = [name for name in given if name and name not in names]
        if unknown:
            raise self.error(f"input(s) {', '.join('$' + n for n in unknown)} not supported (known: "
                             f"{', '.join('$' + n for n in names)})")
        return given

    def check_dtypes(self, slots: dict, mask_slot) -> None:
        """The recorded dtypes: float32 inputs, a float32 or bool mask (pnnx records them as f32 and bool)."""
        for name, slot in slots.items():
            dtype = self.op.input_operands[slot].dtype
            allowed = ("f32", "bool") if slot == mask_slot else ("f32",)
            if dtype is not None and dtype not in allowed:
                raise self.error(f"input {name} is {dtype}, expected {' or '.join(allowed)}")

    def mask_mode(self, mask: np.ndarray | None) -> int:
        if mask is None:
            return NO_MASK
        return self.bool_mask if mask.dtype == np.bool_ else ADDED_MASK

    def attend(self, q, k, v, scale: float, bias) -> tuple:
        """softmax(q k^T * scale + bias) v over the leading dims, and the softmax (the attention weights).
        bias: the additive mask, broadcast to the scores, or None."""
        scores = q @ np.swapaxes(k, -1, -2) * np.float32(scale)
        if bias is not None:
            scores += bias
        softmax_rows(scores, self.empty_rows_zero)
        return scores @ v, scores


@register("F.scaled_dot_product_attention")
class ScaledDotProductAttention(Attention):
    bool_mask = TRUE_ALLOWS
    min_inputs = 3

    def __init__(self, op):
        super().__init__(op)
        dropout = self.float_param("dropout_p", 0.0)
        if dropout != 0:
            # F.scaled_dot_product_attention drops at random whatever the mode: no inference reproduces it
            raise self.error(f"dropout_p={dropout} drops attention weights at random even at inference; only "
                             "dropout_p=0 can run")
        self.is_causal = self.bool_param("is_causal", False)
        scale = self.param("scale", None)
        self.scale = None if scale is None else self.float_param("scale")
        self.enable_gqa = self.bool_param("enable_gqa", False)
        if self.param("attn_mask", None) is not None:
            raise self.error(f"parameter 'attn_mask' must be None or an input, got {self.param('attn_mask')!r}")
        names = self.named_slots(("query", "key", "value", "attn_mask"))
        # by the names pnnx writes, else in their order
        slots = {name: slot for slot, name in enumerate(names) if name} if any(names) else dict(
            zip(("query", "key", "value", "attn_mask"), range(len(names))))
        if len(names) > 4 or sorted(slots) not in (["key", "query", "value"], ["attn_mask", "key", "query", "value"]):
            raise self.error(f"expects inputs query, key, value and an optional attn_mask, the graph gives "
                             f"{len(op.input_operands)}")
        self.qkv_slots = (slots["query"], slots["key"], slots["value"])
        self.mask_slot = slots.get("attn_mask")
        self.check_dtypes(slots, self.mask_slot)
        if self.is_causal and self.mask_slot is not None:
            raise self.error("is_causal=True and an attn_mask cannot both be given (PyTorch refuses it too)")

    def output_shapes(self, input_shapes):
        query, key, value = (tuple(input_shapes[s]) for s in self.qkv_slots)
        if not len(query) == len(key) == len(value) >= 2 or key[-1] != query[-1] or value[-2] != key[-2] \
                or value[:-2] != key[:-2]:
            raise self.shape_error(f"expects query (..., L, E), key (..., S, E) and value (..., S, Ev), got "
                                   f"{query}, {key} and {value}")
        if query[:-2] != key[:-2] and not self.grouped(query, key):
            need = " (with enable_gqa, query heads a multiple of key heads)" if self.enable_gqa else ""
            raise self.shape_error(f"query {query} and key {key} must have the same leading dims{need}")
        if key[-2] < 1:
            raise self.shape_error(f"key {key} has no positions to attend to")
        scores = query[:-1] + (key[-2],)
        if self.mask_slot is not None:
            mask = tuple(input_shapes[self.mask_slot])
            if len(mask) > len(scores) or any(m not in (1, s) for m, s in zip(reversed(mask), reversed(scores))):
                raise self.shape_error(f"attn_mask {mask} does not broadcast to the scores {scores}")
        return [query[:-1] + value[-1:]]

    def grouped(self, query: tuple, key: tuple) -> bool:
        """Grouped-query attention: the heads (dim -3) of the key a divisor of the query's, the rest alike. One
        key head needs no enable_gqa: PyTorch broadcasts it over the query's heads (multi-query attention, as
        timm's MobileNetV4 hybrids write it)."""
        return (len(query) >= 3 and query[:-3] == key[:-3] and key[-3] >= 1
                and (key[-3] == 1 or self.enable_gqa and query[-3] % key[-3] == 0))

    def scale_for(self, depth: int) -> float:
        return 1 / math.sqrt(depth) if self.scale is None else self.scale

    def macs(self, input_shapes, output_shapes):
        query, key, value = (input_shapes[s] for s in self.qkv_slots)
        return math.prod(query[:-1]) * key[-2] * (query[-1] + value[-1])

    def workspace_bytes(self, input_shapes):
        query, key, _ = (input_shapes[s] for s in self.qkv_slots)
        return 4 * (math.prod(key) + math.prod(query[:-1]) * key[-2])

    def forward_numpy(self, inputs, outputs):
        query, key, value = (inputs[s] for s in self.qkv_slots)
        if key.shape[:-2] != query.shape[:-2]:  # grouped: query head h reads key head h // (Hq / Hk)
            repeat = query.shape[-3] // key.shape[-3]
            key, value = np.repeat(key, repeat, axis=-3), np.repeat(value, repeat, axis=-3)
        bias = None
        if self.mask_slot is not None:
            mask = inputs[self.mask_slot]
            bias = additive(mask, self.mask_mode(mask))
        elif self.is_causal:  # query i sees keys 0..i
            bias = np.triu(np.full((query.shape[-2], key.shape[-2]), -np.inf, np.float32), 1)
        outputs[0][...], _ = self.attend(query, key, value, self.scale_for(query.shape[-1]), bias)
