"""nn.MultiheadAttention (MHA): the query, key and value inputs projected to embed_dim by learned weights
(in_proj), the embedding split into num_heads heads of head_dim = embed_dim / num_heads, each head attending on
its own with scale 1/sqrt(head_dim) (the attention itself, and the masks: kuiper/layers/attention.py), and the
heads, joined again, through one more projection (out_proj). Its OpenCL forward is
kuiper/opencl/multihead_attention.py.

What pnnx writes (checked with pnnx 20261020 against torch 2.13): the parameters of the module, in_proj_weight
(3E, E) or q/k/v_proj_weight where kdim or vdim differ from embed_dim, in_proj_bias and out_proj.bias with
bias=True, bias_k/bias_v with add_bias_kv=True; inputs query[, key[, value]] (one input: self-attention) and a
float attn_mask as `$attn_mask`, 2-D (L, S) or 3-D (N*num_heads, L, S). With need_weights the operator has a
second output, the attention weights, averaged over the heads (N, L, S) or per head (N, num_heads, L, S): only
its recorded shape tells which. batch_first=False (pnnx then leaves the parameter out) means (L, N, E) inputs;
a 2-D input is one unbatched sequence. add_bias_kv appends bias_k and bias_v as one more key and value
position, add_zero_attn a position of zeros.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.attention import TRUE_MASKS, Attention, additive
from kuiper.layers.registry import register


@register("nn.MultiheadAttention")
class MultiheadAttention(Attention):
    bool_mask = TRUE_MASKS
    # pnnx writes no is_causal for MHA, and needs none: PyTorch takes it as a hint that the mask given is causal
    is_causal = False

    def __init__(self, op):
        super().__init__(op)
        E = self.embed_dim = self.int_param("embed_dim")
        H = self.num_heads = self.int_param("num_heads")
        if E < 1 or H < 1 or E % H:
            raise self.error(f"embed_dim={E} must be a positive multiple of num_heads={H}")
        self.head_dim = E // H
        self.kdim, self.vdim = self.int_param("kdim", E), self.int_param("vdim", E)
        if self.kdim < 1 or self.vdim < 1:
            raise self.error(f"kdim={self.kdim} and vdim={self.vdim} must be >= 1")
        self.batch_first = self.bool_param("batch_first", False)
        self.read_weights(self.bool_param("bias", True))
        # the positions appended to the projected keys and values, in PyTorch's order: bias_k/bias_v, then zeros
        extra_k, extra_v = [], []
        if self.bool_param("add_bias_kv", False):
            extra_k.append(self.weight("bias_k", (1, 1, E)).reshape(E))
            extra_v.append(self.weight("bias_v", (1, 1, E)).reshape(E))
        if self.bool_param("add_zero_attn", False):
            extra_k.append(np.zeros(E, np.float32))
            extra_v.append(np.zeros(E, np.float32))
        self.extra_rows = len(extra_k)
        self.extra_k, self.extra_v = (np.stack(rows) if rows else None for rows in (extra_k, extra_v))
        self.read_slots()
        if len(op.output_operands) not in (1, 2):
            raise self.error(f"expects 1 or 2 outputs, the graph gives {len(op.output_operands)}")
        self.average_weights = self.weights_averaged() if len(op.output_operands) == 2 else None
        # torch's MHA softmaxes the weights it returns itself; without them it runs SDPA (zeros, see above)
        self.empty_rows_zero = self.average_weights is None

    def read_weights(self, bias: bool) -> None:
        """W^T (in, E) and the bias of the q, k, v and out projections, in self.projections."""
        E = self.embed_dim
        if "in_proj_weight" in self.op.attrs:
            if self.kdim != E or self.vdim != E:
                raise self.error(f"in_proj_weight needs kdim={self.kdim} and vdim={self.vdim} equal to embed_dim={E}")
            weights = np.split(self.weight("in_proj_weight", (3 * E, E)), 3)
        else:
            weights = [self.weight(f"{key}_proj_weight", (E, dim))
                       for key, dim in (("q", E), ("k", self.kdim), ("v", self.vdim))]
        weights.append(self.weight("out_proj.weight", (E, E)))
        biases = [*np.split(self.weight("in_proj_bias", (3 * E,)), 3), self.weight("out_proj.bias", (E,))] \
            if bias else [None] * 4
        self.projections = [(np.ascontiguousarray(w.T), b) for w, b in zip(weights, biases)]

    def read_slots(self) -> None:
        names = self.named_slots(("input", "query", "key", "value", "attn_mask"))
        self.mask_slot = names.index("attn_mask") if "attn_mask" in names else None
        order = [slot for slot, name in enumerate(names) if name != "attn_mask"]
        if not 1 <= len(order) <= 3:
            raise self.error(f"expects query[, key[, value]] and an optional attn_mask, the graph gives "
                             f"{len(self.op.input_operands)} input(s)")
        # one input: self-attention; two: the key is the value too
        self.qkv_slots = (order[0], order[min(1, len(order) - 1)], order[-1])
        if self.op.input_operands[order[0]].dtype == "bool":
            raise self.error("the query is bool: pnnx 20261020 swaps the query and a boolean or constant attn_mask "
                             "of nn.MultiheadAttention; export with a float mask given as an input")
        self.check_dtypes(dict(zip(("query", "key", "value"), self.qkv_slots)) | (
            {} if self.mask_slot is None else {"attn_mask": self.mask_slot}), self.mask_slot)

    def weights_averaged(self) -> bool:
        """Whether the weights output is averaged over the heads: pnnx writes no parameter for it, but the
        recorded ranks tell, the averaged weights having as many dims as the output and the others one more."""
        out, weights = (o.shape for o in self.op.output_operands)
        if out is None or weights is None or len(weights) - len(out) not in (0, 1):
            raise self.error("cannot tell whether the attention weights output is averaged over the heads: the "
                             f"file records shapes {out} and {weights} for the outputs")
        return len(weights) == len(out)

    # ---- shapes -----------------------------------------------------------------------------------------
    def dims(self, shape: tuple) -> tuple:
        """(batch, length) of a query, key or value input: (N, L, E) batch first, (L, N, E), or (L, E) unbatched."""
        if len(shape) == 2:
            return 1, shape[0]
        return (shape[0], shape[1]) if self.batch_first else (shape[1], shape[0])

    def output_shapes(self, input_shapes):
        query, key, value = (tuple(input_shapes[s]) for s in self.qkv_slots)
        rank = len(query)
        dims = (self.embed_dim, self.kdim, self.vdim)
        for name, shape, dim in zip(("query", "key", "value"), (query, key, value), dims):
            if len(shape) != rank or rank not in (2, 3) or shape[-1] != dim:
                raise self.shape_error(f"{name} must be {'(N, L, ' if self.batch_first else '(L, N, '}{dim}) or "
                                       f"unbatched (L, {dim}), as many dims as the query, got {shape}")
        (n, length), (kn, keys), (vn, values) = self.dims(query), self.dims(key), self.dims(value)
        if kn != n or vn != n or values != keys:
            raise self.shape_error(f"query {query}, key {key} and value {value} disagree on the batch or on the "
                                   "key count")
        if keys < 1:
            raise self.shape_error(f"key {key} has no positions to attend to")
        if self.mask_slot is not None:
            self.check_mask(tuple(input_shapes[self.mask_slot]), n if rank == 3 else None, length, keys)
        shapes = [query]
        if self.average_weights is not None:
            lead = (n,) * (rank == 3) + (self.num_heads,) * (not self.average_weights)
            shapes.append(lead + (length, keys + self.extra_rows))
        return shapes

    def check_mask(self, shape: tuple, batch, length: int, keys: int) -> None:
        heads = self.num_heads * (batch or 1)
        if shape not in ((length, keys), (heads, length, keys)):
            raise self.shape_error(f"attn_mask must be (L, S) = {(length, keys)} or (N*num_heads, L, S) = "
                                   f"{(heads, length, keys)}, got {shape}")

    def macs(self, input_shapes, output_shapes):
        query, key = input_shapes[self.qkv_slots[0]], input_shapes[self.qkv_slots[1]]
        (n, length), (_, keys) = self.dims(query), self.dims(key)
        keys_all, E = keys + self.extra_rows, self.embed_dim
        projections = n * (2 * length * E * E + keys * E * (self.kdim + self.vdim))
        return projections + 2 * n * length * keys_all * E

    def workspace_bytes(self, input_shapes):
        """The projections, the transposed keys, the joined heads and the scores (the OpenCL path's buffers;
        numpy's temporaries come to about as much)."""
        query, key = input_shapes[self.qkv_slots[0]], input_shapes[self.qkv_slots[1]]
        (n, length), (_, keys) = self.dims(query), self.dims(key)
        keys_all, E = keys + self.extra_rows, self.embed_dim
        return 4 * n * (2 * length * E + 3 * keys_all * E + self.num_heads * length * keys_all)

    # ---- numpy --------------------------------------------------------------------------------------------
    def batch_major(self, x: np.ndarray) -> np.ndarray:
        """A view of a query, key, value or output array as (N, L, E)."""
        if x.ndim == 2:
            return x[None]
        return x if self.batch_first else x.swapaxes(0, 1)

    def project(self, x: np.ndarray, which: int) -> np.ndarray:
        """x @ W^T + b with projection `which` (0-3: q, k, v, out)."""
        weight_t, bias = self.projections[which]
        y = x @ weight_t
        return y if bias is None else y + bias

    def extend(self, x: np.ndarray, extra) -> np.ndarray:
        """The projected keys or values with the extra positions (bias_k/bias_v, zeros) appended."""
        if extra is None:
            return x
        return np.concatenate([x, np.broadcast_to(extra, (len(x),) + extra.shape)], axis=1)

    def mask_bias(self, inputs: list, batch: int):
        """The additive mask as (L, S') or (N, H, L, S'), or None: padded with zeros for the extra positions."""
        if self.mask_slot is None:
            return None
        mask = inputs[self.mask_slot]
        bias = additive(mask, self.mask_mode(mask))
        if bias.ndim == 3:
            bias = bias.reshape(batch, self.num_heads, *bias.shape[1:])
        return np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, self.extra_rows)])

    def forward_numpy(self, inputs, outputs):
        query, key, value = (self.batch_major(inputs[s]) for s in self.qkv_slots)
        n, H = len(query), self.num_heads
        q = self.project(query, 0)
        k = self.extend(self.project(key, 1), self.extra_k)
        v = self.extend(self.project(value, 2), self.extra_v)

        def heads(x):  # (N, length, E) -> (N, H, length, head_dim)
            return x.reshape(n, x.shape[1], H, self.head_dim).transpose(0, 2, 1, 3)

        out, weights = self.attend(heads(q), heads(k), heads(v), 1 / math.sqrt(self.head_dim),
                                   self.mask_bias(inputs, n))
        joined = out.transpose(0, 2, 1, 3).reshape(n, -1, self.embed_dim)
        self.batch_major(outputs[0])[...] = self.project(joined, 3)
        if len(outputs) == 2:
            outputs[1][...] = (weights.mean(axis=1) if self.average_weights else weights).reshape(outputs[1].shape)
