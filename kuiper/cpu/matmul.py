"""The numpy backend's F.linear: the reference's one GEMM (kuiper/layers/matmul.py) shared over kuiper's
threads, as nn.Linear's is (kuiper/cpu/linear.py), for projections such as swin_v2_t's qkv. It makes no array of
its own: the GEMM writes into the output, where the bias is then added, so it keeps no work buffers either (the
fast attention and LayerNorm do, kuiper/cpu/scratch.py).

torch.matmul and torch.einsum have none: their stacks of small products (swin_v2_t's attention: 147 products of
64x32 @ 32x64) gain nothing reliable from a split over threads, and they take a small share of the forwards
that use them. docs/tuning.md keeps the timings.
"""

from __future__ import annotations

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.layers import matmul


@fast("F.linear")
class LinearFunction(matmul.LinearFunction):
    def forward_numpy(self, inputs, outputs):
        x, weight = inputs[0], inputs[1]
        out = outputs[0].reshape(-1, weight.shape[0])
        threads.matmul(x.reshape(-1, x.shape[-1]), weight.T, out)
        self.add_bias(inputs, outputs[0])
