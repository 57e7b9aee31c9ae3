"""The numpy backend's attention: the stack of (batch x heads) products cut into bands, each band's scores
computed, masked, softmaxed and applied to the values in one go, the bands shared over kuiper's threads; and
MHA's projections as GEMMs shared the same way (kuiper/cpu/threads.py)."""

from __future__ import annotations

import math

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.layers import attention


class BandedAttention(attention.Attention):
    """The banded attend, for both layers: put it before the reference class in the bases."""

    def attend(self, q, k, v, scale, bias):
        lead, (length, depth), keys, value_depth = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
        stack = math.prod(lead)
        # each head's rows side by side (a copy where q, k, v are heads cut out of a wider embedding), k transposed:
        # BLAS ran the (49, 32) @ (32, 49) products of Swin's windows 3x faster on k^T contiguous than on a view
        q = np.ascontiguousarray(q).reshape(stack, length, depth)
        k_t = np.ascontiguousarray(np.swapaxes(k, -1, -2)).reshape(stack, depth, keys)
        v = np.ascontiguousarray(v).reshape(stack, keys, value_depth)
        ones = np.ones((keys, 1), np.float32)
        if bias is not None:  # a view, unless the mask broadcasts over some leading dims but not their neighbours
            bias = np.broadcast_to(bias, lead + (length, keys)).reshape(stack, length, keys)
        scores = np.empty((stack, length, keys), np.float32)
        out = np.empty((stack, length, value_depth), np.float32)

        def band(first, stop, _):
            s = scores[first:stop]
            np.matmul(q[first:stop], k_t[first:stop], out=s)
            s *= np.float32(scale)
            if bias is not None:
                s += bias[first:stop]
            attention.softmax_rows(s, self.empty_rows_zero, ones)
            np.matmul(s, v[first:stop], out=out[first:stop])

        threads.parallel(band, stack, grain=-(-threads.MIN_MACS // max(1, length * keys * (depth + value_depth))))
        return out.reshape(lead + (length, value_depth)), scores.reshape(lead + (length, keys))


@fast("nn.MultiheadAttention")
class MultiheadAttention(BandedAttention, attention.MultiheadAttention):
    def project(self, x, which):
        weight_t, bias = self.projections[which]
        y = np.empty(x.shape[:-1] + weight_t.shape[1:], np.float32)
        threads.matmul(x, weight_t, y)
        if bias is not None:
            y += bias
        return y


@fast("F.scaled_dot_product_attention")
class ScaledDotProductAttention(BandedAttention, attention.ScaledDotProductAttention):
    pass
