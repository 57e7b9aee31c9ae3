"""The numpy backend's attention: the stack of (batch x heads) products cut into bands, each band's scores
computed, masked, softmaxed and applied to the values in one go, the bands shared over kuiper's threads; and
MHA's projections as GEMMs shared the same way (kuiper/cpu/threads.py).

Every array larger than a few KiB that a forward needs besides its inputs and outputs is a work buffer kept
between forwards (kuiper/cpu/scratch.py), reallocated only when the input shapes change: the projections, the
contiguous heads, the scores and their row statistics, a converted mask. A new multi-megabyte array costs a page
fault on each of its 4 KiB pages when first written: on Swin-T's first-stage MHA (64 windows x 49 tokens x 96),
arrays made afresh at every call would come to about 14 MB and 3,400 page faults, which can take longer than
all the layer's arithmetic (docs/tuning.md). `buffers` names what a forward takes at given input shapes, so
`workspace_bytes` reports exactly what is kept.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.cpu.scratch import KeepsScratch, Scratch, view
from kuiper.layers import attention, multihead_attention
from kuiper.layers.walk import contiguous_strides

#: the lowest float32: subtracted from a row of -inf it leaves -inf, which exp turns into zeros
LOWEST = np.finfo(np.float32).min
#: the smallest normal float32: a row sum of zeros raised to it divides the zeros to zeros, not NaN
TINY = np.finfo(np.float32).tiny


def softmax_rows(scores: np.ndarray, rows: np.ndarray, empty_rows_zero: bool, ones: np.ndarray) -> None:
    """attention.softmax_rows, writing the row maxima and then the row sums into `rows` (scores.shape[:-1] + (1,))
    instead of new arrays, and without its boolean temporaries: a row of -inf alone gets the lowest float
    as its maximum (the reference's 0 gives the same zeros after exp), and with `empty_rows_zero` its zero sum
    is raised to TINY (any other row sums to at least 1: its largest element contributes exp(0))."""
    np.max(scores, axis=-1, keepdims=True, out=rows)
    np.maximum(rows, LOWEST, out=rows)
    scores -= rows
    np.exp(scores, out=scores)
    np.matmul(scores, ones, out=rows)  # faster than numpy's sum along short rows
    if empty_rows_zero:
        np.maximum(rows, TINY, out=rows)
    with np.errstate(invalid="ignore"):  # 0 / 0 = NaN where MHA's own softmax gives it
        scores /= rows


def writable(array: np.ndarray, shape: tuple):
    """A contiguous `array` (as the graph's are) reshaped, a view that writes through to it; else None."""
    return array.reshape(shape) if array.flags.c_contiguous else None


def one_stack(mask: tuple, lead: tuple) -> bool:
    """Whether a contiguous mask of shape `mask` broadcast to lead + (L, S) has a (stack, L, S) view: its leading
    dims of more than one element evenly spaced in memory, a dim it broadcasts along having stride 0."""
    shape = (1,) * (len(lead) + 2 - len(mask)) + tuple(mask)
    dims = [(size, 0 if own == 1 else stride) for size, own, stride in zip(lead, shape, contiguous_strides(shape))
            if size != 1]
    return all(outer == inner * size for (_, outer), (size, inner) in zip(dims, dims[1:]))


def over_items(count: int, item_macs: int, part) -> bool:
    """Run part(first, stop) over range(count) in whole items shared by kuiper's threads, where more than one
    thread gets items worth MIN_MACS; else run nothing and return False (the caller splits its work another
    way). A thread then copies its items while their GEMM's result is still in its cache."""
    grain = -(-threads.MIN_MACS // max(1, item_macs))
    if threads.parts(count, grain) < 2:
        return False
    threads.parallel(lambda first, stop, _: part(first, stop), count, grain)
    return True


class BandedAttention(KeepsScratch, attention.Attention):
    """The banded attend and the kept work buffers, for both layers: put it before the reference class in the
    bases. A subclass names its buffers in `buffers`; a forward takes them from `work`."""

    def __init__(self, op):
        super().__init__(op)
        self._plan = None  # (input shapes, {buffer name: shape}) of the last forward

    def buffers(self, input_shapes: list, bool_mask: bool) -> dict:
        """{name: shape} of the work buffers a forward takes from `scratch` at these input shapes, with a boolean
        mask or not."""
        raise NotImplementedError

    def workspace_bytes(self, input_shapes):
        # a mask whose dtype the file does not record is counted as boolean: its float copy, at most
        bool_mask = self.mask_slot is not None and self.op.input_operands[self.mask_slot].dtype in ("bool", None)
        return 4 * sum(math.prod(s) for s in self.buffers([tuple(s) for s in input_shapes], bool_mask).values())

    def work(self, inputs: list) -> dict:
        """The work buffers for these inputs, by name. Where the inputs change the set of buffers, the ones no
        longer needed are let go (a fresh Scratch), so that what the layer holds stays what workspace_bytes says."""
        key = [x.shape for x in inputs], self.mask_slot is not None and inputs[self.mask_slot].dtype == np.bool_
        if self._plan is None or self._plan[0] != key:
            plan = self.buffers(*key)
            if self._plan is not None and plan.keys() != self._plan[1].keys():
                self.scratch = Scratch()
            self._plan = key, plan
        return {name: self.scratch.get(name, shape) for name, shape in self._plan[1].items()}

    def attend_into(self, q, k_t, v, scale: float, bias, out, scores, rows) -> None:
        """softmax(q k_t * scale + bias) v into `out`, the softmax into `scores`: q (stack, L, D), k_t (stack, D, S),
        v (stack, S, Dv), out (stack, L, Dv), scores (stack, L, S), rows (stack, L, 1) for the softmax's row
        statistics, bias broadcastable to the scores or None. Each band writes its own slices of the buffers, and
        reads its slice of q before it writes that of out: out may be q."""
        stack, length, depth = q.shape
        keys, value_depth = k_t.shape[-1], v.shape[-1]
        ones = np.ones((keys, 1), np.float32)

        def band(first, stop, _):
            s = scores[first:stop]
            np.matmul(q[first:stop], k_t[first:stop], out=s)
            s *= np.float32(scale)
            if bias is not None:
                s += bias[first:stop]
            softmax_rows(s, rows[first:stop], self.empty_rows_zero, ones)
            np.matmul(s, v[first:stop], out=out[first:stop])

        threads.parallel(band, stack, grain=-(-threads.MIN_MACS // max(1, length * keys * (depth + value_depth))))

    def fill_additive(self, target: np.ndarray, mask: np.ndarray) -> None:
        """attention.additive of a boolean mask, written into `target` (float32, the mask's shape)."""
        forbidden_where = self.mask_mode(mask) == attention.TRUE_MASKS  # True marks the forbidden keys
        np.copyto(target, np.float32(0 if forbidden_where else -np.inf))
        np.copyto(target, np.float32(-np.inf if forbidden_where else 0), where=mask)


@fast("nn.MultiheadAttention")
class MultiheadAttention(BandedAttention, multihead_attention.MultiheadAttention):
    """Each projection is one GEMM into a buffer ("projected"), copied with its bias into the heads' contiguous
    layout (k transposed); the attention runs in bands, its scores in "projected" too, each head's output
    replacing its queries; the heads are joined back into "projected" for the out projection, which writes the
    layer's output. With the weights output, the scores have a buffer of their own, or per head are that output."""

    def __init__(self, op):
        super().__init__(op)
        H, hd = self.num_heads, self.head_dim
        # the extra key and value positions in the heads' layouts, (H, hd, extra) and (H, extra, hd)
        self.extra_heads = None if self.extra_k is None else (
            self.extra_k.reshape(-1, H, hd).transpose(1, 2, 0), self.extra_v.reshape(-1, H, hd).transpose(1, 0, 2))

    def buffers(self, input_shapes, bool_mask):
        query, key = input_shapes[self.qkv_slots[0]], input_shapes[self.qkv_slots[1]]
        (n, length), (_, keys) = self.dims(query), self.dims(key)
        E, stack, keys_all = self.embed_dim, n * self.num_heads, keys + self.extra_rows
        projected, scores = n * max(length, keys) * E, stack * length * keys_all
        if self.average_weights is None:  # the scores live in "projected" while the heads attend: nothing else does
            projected = max(projected, scores)
        shapes = {"projected": (projected,), "q": (stack, length, self.head_dim),
                  "kt": (stack, self.head_dim, keys_all), "v": (stack, keys_all, self.head_dim),
                  "rows": (stack, length, 1)}
        if self.average_weights:  # the scores are averaged after the heads are joined; per head, they are the output
            shapes["scores"] = (stack, length, keys_all)
        if self.mask_slot is not None and (self.extra_rows or bool_mask):
            shapes["mask"] = tuple(input_shapes[self.mask_slot][:-1]) + (keys_all,)
        return shapes

    def project_heads(self, x, which: int, projected, heads, order: tuple, bias_shape: tuple) -> None:
        """Projection `which` of x (N, rows, in) into `projected` (N, rows, E), then copied with its bias into
        `heads`, the (N, H, ...) layout that `order` makes of (N, rows, H, head_dim)."""
        weight_t, bias = self.projections[which]
        split = projected.reshape(*projected.shape[:2], self.num_heads, self.head_dim).transpose(order)

        def copy(first, stop):
            if bias is None:
                np.copyto(heads[first:stop], split[first:stop])
            else:  # the bias added on the way: one pass over the projection, not two
                np.add(split[first:stop], bias.reshape(bias_shape), out=heads[first:stop])

        def part(first, stop):
            np.matmul(x[first:stop], weight_t, out=projected[first:stop])
            copy(first, stop)

        if not over_items(len(x), math.prod(x.shape[1:]) * weight_t.shape[1], part):
            threads.matmul(x, weight_t, projected)
            copy(0, len(x))

    def forward_numpy(self, inputs, outputs):
        query, key, value = (self.batch_major(inputs[s]) for s in self.qkv_slots)
        n, length, keys = query.shape[0], query.shape[1], key.shape[1]
        E, H, hd = self.embed_dim, self.num_heads, self.head_dim
        keys_all, stack = keys + self.extra_rows, n * H
        work = self.work(inputs)
        projected = work["projected"]
        q, k_t, v = work["q"], work["kt"], work["v"]
        k_heads, v_heads = k_t.reshape(n, H, hd, keys_all), v.reshape(n, H, keys_all, hd)
        self.project_heads(query, 0, view(projected, n, length, E), q.reshape(n, H, length, hd), (0, 2, 1, 3),
                           (H, 1, hd))
        self.project_heads(key, 1, view(projected, n, keys, E), k_heads[..., :keys], (0, 2, 3, 1), (H, hd, 1))
        self.project_heads(value, 2, view(projected, n, keys, E), v_heads[:, :, :keys], (0, 2, 1, 3), (H, 1, hd))
        if self.extra_heads is not None:
            k_heads[..., keys:], v_heads[:, :, keys:] = self.extra_heads

        # the per-head weights output takes the scores as they are made; a strided one (given by hand) after
        scores, copy_scores = work.get("scores"), False
        if self.average_weights is None:
            scores = view(projected, stack, length, keys_all)
        elif scores is None:
            scores = writable(outputs[1], (stack, length, keys_all))
            copy_scores = scores is None
            if copy_scores:
                scores = np.empty((stack, length, keys_all), np.float32)
        # the heads' outputs replace their queries
        self.attend_into(q, k_t, v, 1 / math.sqrt(hd), self.stacked_mask(inputs, work, n, length, keys), q, scores,
                         work["rows"])

        # the heads joined back into "projected", then the out projection
        joined, result = view(projected, n, length, E), self.batch_major(outputs[0])
        weight_t, bias = self.projections[3]

        def join(first, stop):
            np.copyto(joined[first:stop].reshape(stop - first, length, H, hd),
                      q.reshape(n, H, length, hd)[first:stop].transpose(0, 2, 1, 3))

        def part(first, stop):
            join(first, stop)
            np.matmul(joined[first:stop], weight_t, out=result[first:stop])
            if bias is not None:
                result[first:stop] += bias

        if not over_items(n, length * E * E, part):
            join(0, n)
            threads.matmul(joined, weight_t, result)
            if bias is not None:
                result += bias
        if self.average_weights:
            target = writable(outputs[1], (n, length, keys_all))
            mean = np.mean(scores.reshape(n, H, length, keys_all), axis=1, out=target)
            if target is None:
                outputs[1][...] = mean.reshape(outputs[1].shape)
        elif copy_scores:
            outputs[1][...] = scores.reshape(outputs[1].shape)

    def stacked_mask(self, inputs, work, n: int, length: int, keys: int):
        """The additive mask as (stack, L, S') views, or None: the float mask itself where it covers every key,
        else written into the "mask" buffer (a boolean mask made additive, zeros for the extra positions)."""
        if self.mask_slot is None:
            return None
        mask = inputs[self.mask_slot]
        keys_all = keys + self.extra_rows
        bias = mask
        if "mask" in work:
            bias = work["mask"]
            if mask.dtype == np.bool_:
                self.fill_additive(bias[..., :keys], mask)
            else:
                bias[..., :keys] = mask
            bias[..., keys:] = 0
        if bias.ndim == 3:  # (N*H, L, S') is (N, H, L, S'); a 2-D mask broadcasts with zero strides: views both
            bias = bias.reshape(n, self.num_heads, length, keys_all)
        return np.broadcast_to(bias, (n, self.num_heads, length, keys_all)).reshape(n * self.num_heads, length,
                                                                                       keys_all)


@fast("F.scaled_dot_product_attention")
class ScaledDotProductAttention(BandedAttention, attention.ScaledDotProductAttention):
    """q and v are read where they lie (the graph's inputs are contiguous, so their stacks are views), k is
    copied transposed; with grouped heads the copy repeats each key head, and v is copied repeated as well."""

    def __init__(self, op):
        super().__init__(op)
        self.causal_bias = np.zeros((0, 0), np.float32)  # is_causal's -inf above the diagonal, for the last (L, S)

    def buffers(self, input_shapes, bool_mask):
        query, key, value = (tuple(input_shapes[s]) for s in self.qkv_slots)
        lead, length, depth = query[:-2], *query[-2:]
        keys, stack = key[-2], math.prod(query[:-2])
        shapes = {"kt": (stack, depth, keys), "scores": (stack, length, keys), "rows": (stack, length, 1)}
        if key[:-2] != lead:  # grouped heads: each value head repeated for its query heads
            shapes["v"] = (stack, keys, value[-1])
        if self.mask_slot is not None:
            mask = tuple(input_shapes[self.mask_slot])
            if bool_mask:
                shapes["mask"] = mask
            if not one_stack(mask, lead):
                shapes["bias"] = (stack, length, keys)
        elif self.is_causal:
            shapes["causal"] = (length, keys)
        return shapes

    def forward_numpy(self, inputs, outputs):
        query, key, value = (inputs[s] for s in self.qkv_slots)
        lead, (length, depth), keys, value_depth = query.shape[:-2], query.shape[-2:], key.shape[-2], value.shape[-1]
        stack, items = math.prod(lead), math.prod(key.shape[:-2])
        repeat = stack // items if items else 1
        work = self.work(inputs)
        # query head h of a group reads key head h // repeat: the stack is (items, repeat) with repeat innermost
        k_t = work["kt"]
        np.copyto(k_t.reshape(items, repeat, depth, keys), np.swapaxes(key.reshape(items, 1, keys, depth), -1, -2))
        if "v" in work:
            v = work["v"]
            np.copyto(v.reshape(items, repeat, keys, value_depth), value.reshape(items, 1, keys, value_depth))
        else:
            v = value.reshape(stack, keys, value_depth)
        out = writable(outputs[0], (stack, length, value_depth))
        target = np.empty((stack, length, value_depth), np.float32) if out is None else out
        self.attend_into(query.reshape(stack, length, depth), k_t, v, self.scale_for(depth),
                         self.stacked_bias(inputs, work, lead, length, keys), target, work["scores"], work["rows"])
        if out is None:  # an output the layer cannot write through (a strided view given by hand)
            outputs[0][...] = target.reshape(outputs[0].shape)

    def stacked_bias(self, inputs, work, lead: tuple, length: int, keys: int):
        """The additive mask, or is_causal's, as (stack, L, S) views where the broadcast allows, else copied into
        the "bias" buffer; None without either."""
        if self.mask_slot is not None:
            mask = inputs[self.mask_slot]
            if mask.dtype == np.bool_:
                self.fill_additive(work["mask"], mask)
                mask = work["mask"]
            wide = np.broadcast_to(mask, lead + (length, keys))
            if "bias" in work:
                np.copyto(work["bias"].reshape(wide.shape), wide)
                return work["bias"]
            return wide.reshape(math.prod(lead), length, keys)
        if self.is_causal:  # query i sees keys 0..i: written again only when (L, S) changes
            causal = work["causal"]
            if self.causal_bias is not causal:
                causal[...] = 0
                causal[np.triu_indices(length, 1, keys)] = -np.inf
                self.causal_bias = causal
            return np.broadcast_to(causal, (math.prod(lead), length, keys))
        return None
