"""Attention on OpenCL (the layers themselves: kuiper/layers/attention.py, kuiper/layers/multihead_attention.py).

Attention is composed of kernels that exist (kuiper/opencl/gemm.py, cl/copy.cl) and one of its own,
cl/attention.cl, which scales, masks and softmaxes the scores in place, a work-group per row (`RowGroups`:
one work-item on CPU devices). Every product is a stacked GEMM reading its operands where they lie: the heads
of q and v straight out of the projections and the result straight into the joined layout; only k is copied,
transposed, since the GEMM reads B row-major. A mask is read broadcast, by strides (`mask_layout`); one whose
leading dims merge into more than cl/attention.cl's three runs on the host.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers import attention
from kuiper.layers.attention import ADDED_MASK, NO_MASK
from kuiper.opencl.gemm import Gemm, Matrix
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.reduce import RowGroups
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import DeviceTensor
from kuiper.opencl.strided import StridedCopy, View, contiguous_strides, merge_dims

#: the most leading dims a broadcast mask may keep once merged (cl/attention.cl decomposes the stack index)
MASK_DIMS = 3


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


class Attention(OpenCLLayer):
    """What MHA and SDPA share on OpenCL: the scores, their softmax and the product with the values."""

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


@opencl("F.scaled_dot_product_attention")
class ScaledDotProductAttention(Attention, attention.ScaledDotProductAttention):
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
