"""Int8Linear on OpenCL (the layer itself: kuiper/layers/int8_linear.py): cl/int8.cl's int8_linear, one work-item
per output feature and block of TOKENS input rows, reading the int8 weights as they are stored (a byte each) and
widening them in registers. The weights never exist in float on the device.
"""

from __future__ import annotations

from kuiper.layers import int8_linear
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl

#: rows of the input a work-item multiplies by the weight row it reads: the row is read once per TOKENS tokens
TOKENS = 4


@opencl("kuiper.Int8Linear")
class Int8Linear(OpenCLLayer, int8_linear.Int8Linear):
    def build_opencl(self, rt):
        self.cl_kernel = rt.kernel("int8.cl", "int8_linear", [f"-DTOKENS={TOKENS}"])
        self.cl_q = rt.upload(self.qweight)
        self.cl_scales = rt.upload(self.scales)
        # without a bias the kernel is handed the scales, which it never reads as one (has_bias = 0)
        self.cl_bias = self.cl_scales if self.bias is None else rt.upload(self.bias)

    def forward_opencl(self, q, inputs, outputs):
        y = outputs[0]
        if not y.size:  # OpenCL refuses an empty range
            return
        tokens = y.size // self.out_features
        q.run(self.cl_kernel, (self.out_features, -(-tokens // TOKENS)), None, y.buffer, inputs[0].buffer,
              self.cl_q, self.cl_scales, self.cl_bias, int(self.bias is not None), tokens, self.in_features,
              self.out_features, self.group_size, len(self.scales[0]))
