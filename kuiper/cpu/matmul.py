"""The numpy backend's F.linear: the reference's one GEMM (kuiper/layers/matmul.py) shared over kuiper's threads,
as nn.Linear's is (kuiper/cpu/linear.py). swin_v2_t's qkv projection, (3136, 96) @ (96, 288), ran 1.4x faster
on 2 threads than on one here, 1.0x and 1.8x in two runs on a Xeon held to 2 cores (both machines shared).
It makes no array of its own: the GEMM writes into the output, where the bias is then added, so it keeps no
work buffers either (the fast attention and LayerNorm do, kuiper/cpu/scratch.py).

torch.matmul and torch.einsum have none: their stacks of small products (swin_v2_t's attention: 147 products of
64x32 @ 32x64) split over 2 threads by products ran from 0.9x to 1.6x the speed of one, run to run, and they
take about 1% of swin_v2_t's numpy forward and 6% of maxvit_t's.
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
