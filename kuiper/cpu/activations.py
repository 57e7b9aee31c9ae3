"""Fast activations that can overwrite their input, so the fusion pass folds them into the operator before them.

SiLU and Hardswish read x again after their first step has written `out`: the reference layers cannot work
in place, so EfficientNet's and MobileNet-v3's activations ran as operators of their own, one more pass over
memory each (EfficientNet-B0 has 49 SiLUs). Here each formula runs on blocks (of BLOCK elements; GELU's are
larger) through work blocks of its own, which makes them `in_place`: the fusion pass then runs them on each
band of the convolution's output while it is still in the cache (runtime/fusion.py), or on each chunk of rows
of a Linear's (kuiper/cpu/linear.py).

SiLU is also computed in fewer passes, as x / (1 + 2^(-x log2 e)), than the reference's overflow-free
x * sigmoid(x), and numpy's float32 exp2 is faster than its exp. e^-x overflows to inf below x = -88, where
x / inf gives the -0 that x * sigmoid(x) rounds to anyway (and NaN at -inf, as the reference gives).

GELU's reference, x·erfc(-x/√2)/2 through Numerical Recipes' erfc, takes about 33 passes and reads x last.
Here it is max(x, 0) - |x|·Q(|x|), Q the normal distribution's upper tail, by a fit of its own (see FastGELU)
in 25 passes; approximate='tanh' is x / (1 + 2^(-2u log2 e)) like SiLU.

ReLU is np.clip(x, 0, inf) here: np.maximum against a scalar is slower than clip, and ReLU follows most
convolutions of ResNets and RegNets.

docs/tuning.md keeps the timings of these formulas and of FastGELU.block.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.cpu.elementwise import BLOCK, BlockedElementwise, shares
from kuiper.cpu.registry import fast
from kuiper.layers.elementwise import horner
from kuiper.layers.gelu import GELU
from kuiper.layers.hardsigmoid import hardsigmoid
from kuiper.layers.hardswish import Hardswish
from kuiper.layers.relu import ReLU
from kuiper.layers.silu import SiLU

LOG2_E = 1.4426950408889634  # e^y = 2^(y log2 e)


class ThroughWorkBlock(BlockedElementwise):
    """`formula(x, out, *work)` on blocks of `block` elements, through `work_blocks` work blocks of that size: in
    place. Put it before the reference class."""

    in_place = True
    work_blocks = 1
    block = BLOCK

    def formula(self, x, out, *work) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement formula")

    def forward_numpy(self, inputs, outputs):
        self.apply(inputs[0], outputs[0])  # apply shares whole outputs over the threads, in blocks of `block`

    def apply(self, x, out):
        if x.size <= self.block or not (x.flags.c_contiguous and out.flags.c_contiguous):
            # a block, or a part of a fused convolution's output that is not one run of memory (some channels'
            # bands): on this thread, in pieces that fit one work block
            self._pieces(x, out, np.empty((self.work_blocks, min(x.size, self.block)), x.dtype))
            return
        x, out = x.reshape(-1), out.reshape(-1)

        def share(span):  # a whole output handed over at once (a 1x1 convolution's): shared over the threads
            work = np.empty((self.work_blocks, self.block), x.dtype)
            for start in range(span.start, span.stop, self.block):
                stop = min(start + self.block, span.stop)
                self._on(x[start:stop], out[start:stop], work)
        shares(out.size, share)

    def _on(self, x, out, work) -> None:
        """The formula on x, with work blocks of x's shape."""
        self.formula(x, out, *(w[:x.size].reshape(x.shape) for w in work))

    def _pieces(self, x, out, work) -> None:
        """The formula on slices along the first axis of at most `block` elements each (or, where one slice along
        it is larger, on the pieces of each slice)."""
        if x.size <= self.block:
            self._on(x, out, work)
            return
        inner = x.size // len(x)
        if inner > self.block:
            for i in range(len(x)):
                self._pieces(x[i], out[i], work)
            return
        step = self.block // inner
        for i in range(0, len(x), step):
            self._on(x[i:i + step], out[i:i + step], work)


@fast("nn.SiLU", "F.silu")
class FastSiLU(ThroughWorkBlock, SiLU):
    def formula(self, x, out, work):
        np.multiply(x, -LOG2_E, out=work)
        with np.errstate(over="ignore"):  # e^-x is inf below x = -88: x / inf is the -0 SiLU rounds to there
            np.exp2(work, out=work)
        work += 1.0
        np.divide(x, work, out=out)


@fast("nn.Hardswish", "F.hardswish")
class FastHardswish(ThroughWorkBlock, Hardswish):
    def formula(self, x, out, work):
        hardsigmoid(x, work)  # the reference's steps, so the same floats
        np.multiply(work, x, out=out)


@fast("nn.ReLU", "F.relu")
class FastReLU(BlockedElementwise, ReLU):
    def apply(self, x, out):
        np.clip(x, 0.0, np.inf, out=out)


# GELU(x) = max(x, 0) - a·Q(a), a = |x|, Q(a) = erfc(a/√2)/2, and with v = -a/(a + 3) in (-1, 0],
#   a·Q(a) = -v · 2^(P(v) - κa²),  κ = log2(e)/2,
# P fitted by tools/fit_gelu.py (least squares at Chebyshev nodes of v for a in [0, 13.2], the a where GELU(-a)
# is a normal float32; degree 7): relative error below 2.5e-7 in float64. Coefficients, constant term first:
_GELU_P = (0.584962153, 2.01055283, -0.374806405, -0.352908597, 0.171191122, -0.406279772, -0.739911848,
           -0.284720321)
_GELU_KAPPA = 0.5 * LOG2_E
# x is clamped at this from above: GELU(x) is x beyond it (2^-κa² is 0 even in float64), and +inf would make v
# inf/inf. Below, -inf does make it NaN, as the reference's -inf·0 does
_GELU_CLAMP = 40.0
# the tanh form: x·σ(2u) = x / (1 + 2^(-2u·log2 e)), 2u = x·(_TANH_A + _TANH_B·x²)
_TANH_A = 2.0 * math.sqrt(2.0 / math.pi)
_TANH_B = _TANH_A * 0.044715


@fast("nn.GELU", "F.gelu")
class FastGELU(ThroughWorkBlock, GELU):
    work_blocks = 3
    #: each numpy call lets Python's GIL go and takes it back, 25 calls a block here: larger blocks make fewer
    #: hand-overs, and their work blocks (3 MB) still fit the L3 cache
    block = 4 * BLOCK

    def formula(self, x, out, b, v, p):
        with np.errstate(over="ignore", invalid="ignore"):  # only where x is huge, infinite or NaN
            if self.approximate == "tanh":
                np.square(x, out=b)
                b *= -LOG2_E * _TANH_B
                b += -LOG2_E * _TANH_A
                b *= x                        # -2u·log2 e: e^-2u overflows to inf far below 0, where x / inf is -0
                np.exp2(b, out=b)
                b += 1.0
                np.divide(x, b, out=out)
                return
            np.clip(x, -np.inf, _GELU_CLAMP, out=b)
            np.abs(b, out=b)                  # a
            np.subtract(-3.0, b, out=v)
            np.divide(b, v, out=v)            # v = -a / (a + 3)
            np.square(b, out=b)
            b *= _GELU_KAPPA                  # κa²: rounded twice, as a·√κ squared would be three times
            horner(_GELU_P, v, p)
            p -= b
            np.exp2(p, out=p)
            p *= v                            # -a·Q(a)
            np.add(x, p, out=out)
            np.maximum(p, out, out=out)       # x + p where x >= 0, p below; a tie gives the second: GELU(+0) is +0
