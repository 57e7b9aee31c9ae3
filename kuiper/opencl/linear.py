"""Linear on OpenCL (the layer itself: kuiper/layers/linear.py): one GEMM of kuiper/opencl/gemm.py, every leading
axis of the input folded into its rows and the bias added per column as the kernel stores C.

On CPUs the weights W^T are uploaded in panels of PANEL columns (ConstantB), so that a work-item reads its
columns of each k right after those of the last k, not a whole row of W^T further on: the GEMM is then a stack
of one product per panel, and a second GEMM computes the columns past the last whole panel. The GEMM's
variant is chosen per input shape (kuiper/opencl/tuning.py, its dimensions from `gemm_dims`). A residual sum
and an activation fused after the layer (kuiper/opencl/fused.py) run in the GEMM's store (`cl_epilogue`).
"""

from __future__ import annotations

import math

from kuiper.layers import linear
from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, NO_EPILOGUE, Gemm, Matrix
from kuiper.opencl.layer import FeaturesLayer
from kuiper.opencl.panels import ConstantB
from kuiper.opencl.registry import opencl


@opencl("nn.Linear")
class Linear(FeaturesLayer, linear.Linear):
    #: the fused steps the GEMM applies as it stores the output (a KernelEpilogue, set by FusedLayer)
    cl_epilogue = NO_EPILOGUE

    #: a fused activation or residual sum runs in the GEMM's store (kuiper/runtime/fusion.py)
    takes_opencl_epilogue = True

    def build_opencl(self, rt):
        self.gemm = Gemm(rt, epilogue=self.cl_epilogue)
        self.cl_weight_t = ConstantB(rt, self.weight_t, self.bias)  # on CPUs in panels, one product each
        self.variants = self.gemm.choices(self.gemm_dims, k=self.cl_weight_t.k)

    def forward_opencl(self, q, inputs, outputs):
        y = outputs[0]
        if not y.size:  # OpenCL refuses an empty range
            return
        if self.cl_epilogue is NO_EPILOGUE:
            x, first, rows = self.input_rows(q, inputs[0])
        else:  # every row: a fused epilogue reads the tensors it adds by the output's index
            x, first, rows = inputs[0].buffer, 0, y.size // self.out_features
        shape = inputs[0].shape if rows == y.size // self.out_features else (rows, self.in_features)
        calls = self.cl_weight_t.operands(Matrix(y.buffer, self.out_features, offset=first * self.out_features))
        a = Matrix(x, self.in_features, offset=first * self.in_features)
        common = dict(bias_mode=NO_BIAS if self.bias is None else COLUMN_BIAS,
                      epilogue=self.cl_epilogue.args(inputs, y))
        for i, call in enumerate(calls):  # the layer's variant for the panels, the rule's for the columns past them
            self.gemm(q, rows, a=a, **call, **common, variant=None if i else self.variants.pick((shape,)))

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack) of the GEMMs for these input shapes: every leading axis folds into the rows."""
        return self.cl_weight_t.dims(math.prod(shapes[0][:-1]))
