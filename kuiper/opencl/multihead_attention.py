"""nn.MultiheadAttention on OpenCL (the layer itself: kuiper/layers/multihead_attention.py): the four
projections as GEMMs with the weights uploaded once (ConstantB) and the bias added by the GEMM, the attention of
all N x H heads as kuiper/opencl/attention.py's stacked GEMMs and softmax, and the weights output as the scores
themselves or their mean over the heads (one more GEMM, by a row of 1/H). The q, k and v projections read their
input's rows with strides, so (L, N, E) inputs need no transpose.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers import multihead_attention
from kuiper.opencl.attention import Attention
from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, Matrix
from kuiper.opencl.panels import ConstantB
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import DeviceTensor
from kuiper.opencl.strided import View


@opencl("nn.MultiheadAttention")
class MultiheadAttention(Attention, multihead_attention.MultiheadAttention):
    def build_opencl(self, rt):
        super().build_opencl(rt)
        self.cl_projections = [ConstantB(rt, w, b) for w, b in self.projections]
        self.cl_extras = [None if e is None else DeviceTensor(rt, rt.upload(e), e.shape, rt.stored(e.dtype))
                          for e in (self.extra_k, self.extra_v)]
        self.cl_mean = rt.upload(np.full(self.num_heads, 1 / self.num_heads, np.float32))

    def strides(self, shape: tuple) -> tuple:
        """(rows from one position to the next, rows from one batch item to the next) of an input's layout."""
        n, length = self.dims(shape)
        return (1, length) if len(shape) == 2 or self.batch_first else (n, 1)

    def linear(self, q, which: int, rows: int, c: Matrix, a: Matrix, items: int = 1) -> None:
        """C = A @ W^T + b with projection `which`, for `items` stacked products of `rows` rows."""
        weight_t = self.cl_projections[which]
        for call in weight_t.operands(c):
            self.gemm(q, rows, a=a, **call, items=items, bias_mode=NO_BIAS if weight_t.bias is None else COLUMN_BIAS)

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
