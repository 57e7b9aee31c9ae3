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

What pnnx writes (checked with pnnx 20261020 against torch 2.13):
* MHA: the parameters of the module, in_proj_weight (3E, E) or q/k/v_proj_weight where kdim or vdim differ
  from embed_dim, in_proj_bias and out_proj.bias with bias=True, bias_k/bias_v with add_bias_kv=True; inputs
  query[, key[, value]] (one input: self-attention) and a float attn_mask as `$attn_mask`, 2-D (L, S) or 3-D
  (N*num_heads, L, S). With need_weights the operator has a second output, the attention weights, averaged over
  the heads (N, L, S) or per head (N, num_heads, L, S): only its recorded shape tells which. batch_first=False
  (pnnx then leaves the parameter out) means (L, N, E) inputs; a 2-D input is one unbatched sequence.
  add_bias_kv appends bias_k and bias_v as one more key and value position, add_zero_attn a position of zeros.
* SDPA: inputs $query, $key, $value[, $attn_mask] (any broadcastable shape), dropout_p, is_causal, and scale and
  enable_gqa when given (grouped-query attention: key and value have fewer heads, each shared by consecutive
  query heads).

On OpenCL the layer is composed of kernels that exist (kuiper/opencl/gemm.py, cl/copy.cl) and one of its own,
cl/attention.cl, which scales, masks and softmaxes the scores in place, a work-group per row. Every product is
a stacked GEMM reading its operands where they lie: the heads of q and v straight out of the projections and
the result straight into the joined layout; only k is copied, transposed, since the GEMM reads B row-major.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.reduce import RowGroups
from kuiper.layers.registry import register
from kuiper.opencl.strided import StridedCopy, View, contiguous_strides, merge_dims
from kuiper.opencl import DeviceTensor
from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, ConstantB, Gemm, Matrix

#: how cl/attention.cl reads its mask: none, added, boolean True = masked out (MHA), boolean True = takes part
NO_MASK, ADDED_MASK, TRUE_MASKS, TRUE_ALLOWS = range(4)
#: the most leading dims a broadcast mask may keep once merged (cl/attention.cl decomposes the stack index)
MASK_DIMS = 3


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


def broadcast_strides(shape: tuple, target: tuple) -> tuple:
    """Element strides that read a contiguous array of `shape` broadcast to `target` (0 along broadcast dims)."""
    shape = (1,) * (len(target) - len(shape)) + tuple(shape)
    return tuple(0 if size == 1 else stride for size, stride in zip(shape, contiguous_strides(shape)))


def mask_layout(shape: tuple, target: tuple) -> tuple:
    """How cl/attention.cl reads a contiguous mask of `shape` broadcast to `target` (the stack's leading dims, then
    (L, S)): the leading dims merged where they can be, ((size, _, stride), ...), and the strides of L and S."""
    strides, lead = broadcast_strides(shape, target), target[:-2]
    return merge_dims(lead, contiguous_strides(lead), strides[:-2]) if lead else (), strides[-2:]


class DeviceBuffers:
    """A layer's work buffers on the device, by name, each reallocated only when an input needs it larger."""

    def __init__(self, rt):
        self.rt = rt
        self._tensors = {}

    def get(self, name: str, count: int) -> DeviceTensor:
        tensor = self._tensors.get(name)
        if tensor is None or tensor.size < count:
            dtype = self.rt.stored(np.float32)  # stored at the runtime's precision, as the kernels read it
            buffer = self.rt.allocate(dtype.itemsize * count)
            tensor = self._tensors[name] = DeviceTensor(self.rt, buffer, (count,), dtype)
        return tensor


class Attention(Layer):
    """What MHA and SDPA share: the attention itself, on numpy and on OpenCL."""

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

    # ---- OpenCL ---------------------------------------------------------------------------------------
    def build_opencl(self, rt):
        self.gemm = Gemm(rt)
        self.copier = StridedCopy(rt)
        self.cl_softmax = RowGroups(rt, "attention.cl", "attention_softmax", shortest=1)
        self.cl_work = DeviceBuffers(rt)

    def attend_opencl(self, q, sizes: tuple, query: Matrix, keys_t: Matrix, values: Matrix, out: Matrix,
                      scale: float, mask) -> DeviceTensor:
        """The attention of a stack of `items` x `groups` products, sizes = (L, S, D, Dv, groups, items): scores
        = Q K^T (K^T given transposed), softmax with scale and mask in place, out = scores V. mask: None or
        (device tensor, the shape it broadcasts to: the stack's leading dims or none, then (L, S)). Returns the
        softmaxed scores, (stack, L, S) contiguous."""
        length, keys, depth, value_depth, groups, items = sizes
        stack = groups * items
        scores = self.cl_work.get("scores", stack * length * keys)
        weights = Matrix(scores.buffer, keys, group=length * keys, item=groups * length * keys)
        self.gemm(q, length, keys, depth, c=weights, a=query, b=keys_t, groups=groups, items=items)
        self.cl_softmax.run(q, stack * length, keys, scores.buffer, length, keys, scale, int(self.is_causal),
                            int(self.empty_rows_zero), *self.mask_args(mask, scores))
        self.gemm(q, length, value_depth, keys, c=out, a=weights, b=values, groups=groups, items=items)
        return scores

    def mask_args(self, mask, scores) -> tuple:
        """cl/attention.cl's mask arguments: the float and the bool buffer (one unused), the mode, the sizes of
        the inner two of the mask's merged leading dims and their three strides, its row and column strides and
        its column count (the columns past it, MHA's extra keys, are not masked)."""
        if mask is None:
            return scores.buffer, scores.buffer, NO_MASK, 1, 1, 0, 0, 0, 0, 0, 0
        tensor, shape = mask
        dims, (row, column) = mask_layout(tensor.shape, shape)
        (_, _, s0), (n1, _, s1), (n2, _, s2) = ((1, 0, 0),) * (MASK_DIMS - len(dims)) + dims
        mode = self.mask_mode(tensor)
        return (tensor.buffer if mode == ADDED_MASK else scores.buffer,
                scores.buffer if mode == ADDED_MASK else tensor.buffer, mode, n1, n2, s0, s1, s2, row, column,
                shape[-1])


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

    # ---- OpenCL ---------------------------------------------------------------------------------------
    def build_opencl(self, rt):
        super().build_opencl(rt)
        self.cl_projections = [(ConstantB(rt, w), None if b is None else rt.upload(b)) for w, b in self.projections]
        self.cl_extras = [None if e is None else DeviceTensor(rt, rt.upload(e), e.shape, rt.stored(e.dtype))
                          for e in (self.extra_k, self.extra_v)]
        self.cl_mean = rt.upload(np.full(self.num_heads, 1 / self.num_heads, np.float32))

    def strides(self, shape: tuple) -> tuple:
        """(rows from one position to the next, rows from one batch item to the next) of an input's layout."""
        n, length = self.dims(shape)
        return (1, length) if len(shape) == 2 or self.batch_first else (n, 1)

    def linear(self, q, which: int, rows: int, c: Matrix, a: Matrix, items: int = 1) -> None:
        """C = A @ W^T + b with projection `which`, for `items` stacked products of `rows` rows."""
        weight_t, bias = self.cl_projections[which]
        self.gemm(q, rows, a=a, **weight_t.operands(c), items=items, bias=bias,
                  bias_mode=NO_BIAS if bias is None else COLUMN_BIAS)

    def forward_opencl(self, q, inputs, outputs):
        query, key, value = (inputs[s] for s in self.qkv_slots)
        if not outputs[0].size:
            return
        (n, length), (_, keys) = self.dims(query.shape), self.dims(key.shape)
        E, H, hd = self.embed_dim, self.num_heads, self.head_dim
        keys_all = keys + self.extra_rows
        work = self.cl_work
        seq, batch = self.strides(query.shape)
        key_seq, key_batch = self.strides(key.shape)
        # the projections: q in the query's own row order, k and v batch-major with room for the extra rows
        projected = work.get("q", n * length * E)
        self.linear(q, 0, n * length, Matrix(projected.buffer, E), Matrix(query.buffer, E))
        projected_k, projected_v = (work.get(name, n * keys_all * E) for name in ("k", "v"))
        for which, source, dim, dest, extra in ((1, key, self.kdim, projected_k, self.cl_extras[0]),
                                                (2, value, self.vdim, projected_v, self.cl_extras[1])):
            self.linear(q, which, keys, Matrix(dest.buffer, E, item=keys_all * E),
                        Matrix(source.buffer, key_seq * dim, item=key_batch * dim), items=n)
            if extra is not None:  # the same rows after every item's keys: read with a batch stride of 0
                self.copier(q, (n, self.extra_rows, E), View(dest, (keys_all * E, E, 1), keys * E),
                            View(extra, (0, E, 1)))
        keys_t = work.get("kt", n * keys_all * E)
        self.copier(q, (n, H, hd, keys_all), View(keys_t, (H * hd * keys_all, hd * keys_all, keys_all, 1)),
                    View(projected_k, (keys_all * E, hd, 1, E)))
        joined = work.get("joined", n * length * E)
        mask = None
        if self.mask_slot is not None:
            tensor = inputs[self.mask_slot]
            mask = (tensor.reshape(n, H, length, keys), (n, H, length, keys)) if tensor.ndim == 3 else \
                (tensor, (length, keys))
        scores = self.attend_opencl(
            q, (length, keys_all, hd, hd, H, n),
            query=Matrix(projected.buffer, seq * E, group=hd, item=batch * E),
            keys_t=Matrix(keys_t.buffer, keys_all, group=hd * keys_all, item=H * hd * keys_all),
            values=Matrix(projected_v.buffer, E, group=hd, item=keys_all * E),
            out=Matrix(joined.buffer, seq * E, group=hd, item=batch * E),
            scale=1 / math.sqrt(hd), mask=mask)
        self.linear(q, 3, n * length, Matrix(outputs[0].buffer, E), Matrix(joined.buffer, E))
        if len(outputs) == 2:
            self.weights_opencl(q, scores, outputs[1], n, length * keys_all)

    def weights_opencl(self, q, scores, out, n: int, size: int) -> None:
        """The weights output: the softmaxed scores as they are, or their mean over the heads as a GEMM of a row
        of 1/H by each item's (H, L*S') scores."""
        if not self.average_weights:
            q.copy(out.buffer, scores.buffer, out.nbytes)
            return
        H = self.num_heads
        self.gemm(q, 1, size, H, c=Matrix(out.buffer, size, item=size), a=Matrix(self.cl_mean, H),
                  b=Matrix(scores.buffer, size, item=H * size), items=n)


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
        """Grouped-query attention: the heads (dim -3) of the key a divisor of the query's, the rest alike."""
        return (self.enable_gqa and len(query) >= 3 and query[:-3] == key[:-3] and key[-3] >= 1
                and query[-3] % key[-3] == 0)

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

    # ---- OpenCL ---------------------------------------------------------------------------------------
    def forward_opencl(self, q, inputs, outputs):
        query, key, value = (inputs[s] for s in self.qkv_slots)
        out = outputs[0]
        length, depth, keys, value_depth = *query.shape[-2:], *value.shape[-2:]
        scores_shape = query.shape[:-1] + (keys,)
        mask = None if self.mask_slot is None else (inputs[self.mask_slot], scores_shape)
        if mask is not None and len(mask_layout(mask[0].shape, scores_shape)[0]) > MASK_DIMS:
            q.run_on_host(self, inputs, outputs)
            return
        if not out.size:
            return
        items = math.prod(key.shape[:-2])
        groups = math.prod(query.shape[:-2]) // items
        keys_t = self.cl_work.get("kt", key.size)
        self.copier(q, (items, depth, keys), View(keys_t, (depth * keys, keys, 1)), View(key, (keys * depth, 1, depth)))
        self.attend_opencl(
            q, (length, keys, depth, value_depth, groups, items),
            query=Matrix(query.buffer, depth, group=length * depth, item=groups * length * depth),
            keys_t=Matrix(keys_t.buffer, keys, item=depth * keys),
            values=Matrix(value.buffer, value_depth, item=keys * value_depth),
            out=Matrix(out.buffer, value_depth, group=length * value_depth, item=groups * length * value_depth),
            scale=self.scale_for(depth), mask=mask)
