"""GatedLinear on OpenCL (the layer itself: kuiper/layers/gated.py): both projections in one GEMM.

On a CPU whose GEMM has 32-column blocks (the compiler targets AVX-512: `Gemm.cpu_blocks`), the joined weights
go up with the gate's and the up projection's columns alternating 16 by 16, so that every 32-column panel holds
16 columns of each: a gemm_cpu block then holds the gate's vector and the up projection's vector of the same 16
outputs, and its store writes silu(gate) * up (KernelEpilogue.glu). One launch, and the product of twice the
width is never written. Elsewhere (a GPU, AVX2, an out_features that is not a multiple of 16) the GEMM writes
both halves into a scratch buffer and cl/activation.cl's gate_times_up finishes.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.layers import gated
from kuiper.opencl.gemm import COLUMN_BIAS, NO_BIAS, Gemm, KernelEpilogue, Matrix
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.panels import PANEL, ConstantB
from kuiper.opencl.runtime import round_up

#: on CPUs the gate's columns and the up projection's alternate in runs of this many: one gemm_cpu vector
RUN = PANEL // 2


def interleaved(both: np.ndarray) -> np.ndarray:
    """(rows, 2 * n) with the gate's n columns first, then the up projection's -> runs of RUN of each in turn."""
    rows, n = both.shape[0], both.shape[1] // 2
    return np.stack([both[:, :n].reshape(rows, n // RUN, RUN), both[:, n:].reshape(rows, n // RUN, RUN)],
                    axis=2).reshape(rows, 2 * n)


class GatedLinear(OpenCLLayer, gated.GatedLinear):
    def build_opencl(self, rt):
        self.glu = rt.is_cpu and self.out_features % RUN == 0 and Gemm(rt).cpu_blocks[0][0] == PANEL
        weight_t, bias = self.weight_t, self.bias
        if self.glu:
            weight_t, bias = interleaved(weight_t), None if bias is None else interleaved(bias[None])[0]
        self.gemm = Gemm(rt, epilogue=KernelEpilogue(glu=self.glu))
        self.cl_weight_t = ConstantB(rt, weight_t, bias)
        self.cl_finish = None if self.glu else rt.kernel("activation.cl", "gate_times_up", ["-DACT=act_silu"])
        self.variants = self.gemm.choices(self.gemm_dims, k=self.cl_weight_t.k)

    def forward_opencl(self, q, inputs, outputs):
        y = outputs[0]
        rows = y.size // self.out_features
        if not rows:  # OpenCL refuses an empty range
            return
        # the GEMM's output: y itself, or both halves side by side in a scratch buffer
        width = self.out_features * (1 if self.glu else 2)
        both = y.buffer if self.glu else q.scratch("gated", rows * width * q.runtime.stored(np.float32).itemsize)
        calls = self.cl_weight_t.operands(Matrix(both, width), glu=self.glu)
        a = Matrix(inputs[0].buffer, self.in_features)
        bias_mode = NO_BIAS if self.bias is None else COLUMN_BIAS
        for i, call in enumerate(calls):  # the layer's variant for the panels, the rule's for the columns past them
            self.gemm(q, rows, a=a, **call, bias_mode=bias_mode,
                      variant=None if i else self.variants.pick((inputs[0].shape,)))
        if not self.glu:
            q.run(self.cl_finish, (round_up(self.out_features, 16), rows), None, y.buffer, both, self.out_features,
                  rows)

    def gemm_dims(self, shapes) -> tuple:
        """(m, n, stack) of the GEMMs for these input shapes: every leading axis folds into the rows."""
        return self.cl_weight_t.dims(math.prod(shapes[0][:-1]))
