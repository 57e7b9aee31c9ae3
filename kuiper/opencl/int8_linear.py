"""Int8Linear on OpenCL (the layer itself: kuiper/layers/int8_linear.py): cl/int8.cl's int8_linear reads the int8
weights as they are stored, a byte each, and widens them in registers; the weights never exist in float on the
device.

Two builds of the kernel: one output feature for one token per work-item (decode, and the tokens left over from
whole blocks), and BLOCK = (ROWS, TOKENS) per work-item for the whole blocks of TOKENS tokens of a prefill, where
each widened weight serves TOKENS tokens and each loaded input ROWS features. The block was the fastest of
(1|2|4) x (2|4|8) on Intel's CPU runtime (docs/performance.md).
"""

from __future__ import annotations

from kuiper.layers import int8_linear
from kuiper.opencl.layer import FeaturesLayer
from kuiper.opencl.registry import opencl

#: output features and tokens a work-item computes in a prefill's whole blocks of tokens
BLOCK = (2, 4)


@opencl("kuiper.Int8Linear")
class Int8Linear(FeaturesLayer, int8_linear.Int8Linear):
    @property
    def supports_opencl(self) -> bool:
        """The kernel widens whole vectors of 8 weights of one group: other group sizes run on the host."""
        return self.group_size % 8 == 0

    def build_opencl(self, rt):
        def build(rows, tokens):
            return rt.kernel("int8.cl", "int8_linear", [f"-DROWS={rows}", f"-DTOKENS={tokens}",
                                                        f"-DGROUP={self.group_size}"])

        self.cl_one, self.cl_block = build(1, 1), build(*BLOCK)
        self.cl_q = rt.upload(self.qweight)
        self.cl_scales = rt.upload(self.scales)
        # without a bias the kernel is handed the scales, which it never reads as one (has_bias = 0)
        self.cl_bias = self.cl_scales if self.bias is None else rt.upload(self.bias)

    def forward_opencl(self, q, inputs, outputs):
        y = outputs[0]
        x, first, count = self.input_rows(q, inputs[0])
        rows, per = BLOCK
        tokens = first + count
        # where every row from 0 is asked for, whole blocks of `per` tokens, then the rest one by one
        whole = 0 if first else count - count % per
        first = first or whole
        args = (y.buffer, x, self.cl_q, self.cl_scales, self.cl_bias, int(self.bias is not None))
        sizes = (self.in_features, self.out_features, len(self.scales[0]))
        if whole:
            q.run(self.cl_block, (-(-self.out_features // rows), whole // per), None, *args, 0, *sizes)
        if tokens > first:
            q.run(self.cl_one, (self.out_features, tokens - first), None, *args, first, *sizes)
