"""The numpy backend's ConvTranspose2d: the reference's GEMM and col2im (kuiper/layers/conv_transpose2d.py), one
batch item at a time, the GEMM shared over kuiper's threads, in buffers kept between forwards."""

from __future__ import annotations

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.cpu.scratch import KeepsScratch
from kuiper.layers import conv_transpose2d
from kuiper.layers.conv2d import batched


@fast("nn.ConvTranspose2d")
class ConvTranspose2d(KeepsScratch, conv_transpose2d.ConvTranspose2d):
    def workspace_bytes(self, input_shapes):
        return self.item_workspace_bytes(input_shapes)  # one item at a time

    def forward_numpy(self, inputs, outputs):
        x, out = batched(inputs[0]), batched(outputs[0])
        n, _, h, w = x.shape
        columns = self.scratch.get("columns", (self.groups, self.w_gemm.shape[1], h * w))
        taps = columns.reshape(self.out_channels, *self.kernel_size, h, w)
        full = self.scratch.get("full", (self.out_channels, *self.uncropped((h, w), out.shape[2:])))
        x_groups = x.reshape(n, self.groups, -1, h * w)
        for item in range(n):
            threads.matmul(self.w_gemm, x_groups[item], columns)
            full.fill(0.0)
            self.col2im(taps, full, out[item])
        self.add_bias(out)
