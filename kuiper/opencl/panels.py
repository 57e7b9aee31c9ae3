"""A layer's constant B (its weights, K x N) and bias on a device, as kuiper/opencl/gemm.py's products read them.

On CPUs B is stored in panels of PANEL columns, each K x PANEL in one run of memory, and multiplied as a stack
of one product per panel (`panels`): a work-item then reads its columns of each k next to the last k's, not
one B row (ldb floats) further on, where long rows put every k on a new page and, rows of 3072 floats being
12 KB apart, in the same L1 set. It gains nothing where B is small and in the cache; from memory, as a
classifier's 1000 x 1024 weights come after the rest of a forward, it reads them 3x as fast. Columns past the
last whole panel are a second product.
"""

from __future__ import annotations

import numpy as np

from kuiper.opencl.gemm import CPU_BLOCKS, Matrix

#: the columns of a panel: gemm_cpu's widest block
PANEL = CPU_BLOCKS[0][0]


def panels(b: np.ndarray) -> np.ndarray:
    """B (K, N), N a multiple of PANEL, as N / PANEL panels of K x PANEL: B[k, p * PANEL + j] is [p, k, j]."""
    k, n = b.shape
    return np.ascontiguousarray(b.reshape(k, n // PANEL, PANEL).transpose(1, 0, 2))


class ConstantB:
    """A layer's constant B (K, N), its weights, and its bias (N values) if any, on a device: on CPUs in panels
    (see PANEL) where N has one or more, the columns past the last whole panel after them as a K x (N % PANEL)
    matrix of their own, else as it is. `operands` gives the Gemm calls' arguments for C = A @ B + bias."""

    def __init__(self, rt, b: np.ndarray, bias: np.ndarray | None = None):
        self.k, self.n = b.shape
        self.panels = self.n // PANEL if rt.is_cpu else 0
        done = self.panels * PANEL  # the columns in whole panels
        self.buffer = rt.upload(np.concatenate([panels(b[:, :done]).ravel(), b[:, done:].ravel()])
                                if self.panels else b)
        self.bias = None if bias is None else rt.upload(bias)
        # the rest's bias, as the kernel reads it from the rest's own column 0
        self.rest_bias = rt.upload(bias[done:]) if bias is not None and self.panels and done < self.n else self.bias

    def dims(self, rows: int) -> tuple:
        """(m, n, stack) of the products as Gemm runs them (the panels', where there are), for A of `rows` rows."""
        return (rows, PANEL, self.panels) if self.panels else (rows, self.n, 1)

    def operands(self, c: Matrix, glu: bool = False) -> list:
        """Gemm's n, k, c, b, groups and bias for each call of C = A @ B + bias into `c`: the panels, panel g
        writing C's columns from g * PANEL (the kernel's per-column bias reads bias[g * PANEL + j]), then the
        columns past them; or one call where B is stored as it is. A is the same for all. glu: the panels'
        columns are pairs of a gate's and an up projection's (KernelEpilogue.glu), and each writes half as many."""
        if not self.panels:
            return [dict(n=self.n, k=self.k, c=c._replace(group=self.n), b=Matrix(self.buffer, self.n,
                         group=self.k * self.n), groups=1, bias=self.bias)]
        done, rest = self.panels * PANEL, self.n - self.panels * PANEL
        written = PANEL // 2 if glu else PANEL
        calls = [dict(n=PANEL, k=self.k, c=c._replace(group=written), b=Matrix(self.buffer, PANEL, group=self.k * PANEL),
                      groups=self.panels, bias=self.bias)]
        if rest:
            calls.append(dict(n=rest, k=self.k, c=c._replace(offset=c.offset + done, group=rest),
                              b=Matrix(self.buffer, rest, offset=self.k * done, group=self.k * rest), groups=1,
                              bias=self.rest_bias))
        return calls
