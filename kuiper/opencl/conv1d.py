"""Conv1d on OpenCL (the layer: kuiper/layers/conv1d.py): the OpenCL Conv2d over the unit-height view of the
input and output, which costs no copy (DeviceTensor.reshape)."""

from __future__ import annotations

from kuiper.layers import conv1d
from kuiper.opencl import conv2d
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl


@opencl("nn.Conv1d")
class Conv1d(OpenCLLayer, conv1d.Conv1d):
    conv2d_class = conv2d.Conv2d

    def build_opencl(self, rt):
        self.conv.build_opencl(rt)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        self.conv.forward_opencl(q, [x.reshape(conv1d.with_height(x.shape))], [y.reshape(conv1d.with_height(y.shape))])
