"""The numpy backend's Linear: the reference's one GEMM (kuiper/layers/linear.py) shared over kuiper's threads."""

from __future__ import annotations

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.layers import linear


@fast("nn.Linear")
class Linear(linear.Linear):
    def forward_numpy(self, inputs, outputs):
        out = outputs[0].reshape(-1, self.out_features)
        threads.matmul(inputs[0].reshape(-1, self.in_features), self.weight_t, out)
        self.add_bias(out)
