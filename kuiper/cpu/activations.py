"""Fast activations that can overwrite their input, so the fusion pass folds them into the convolution before them.

SiLU and Hardswish read x again after their first step has written `out`: the reference layers cannot work
in place, so EfficientNet's and MobileNet-v3's activations ran as operators of their own, one more pass over
memory each (EfficientNet-B0: 49 SiLUs, 10 of its 36 ms on 2 threads of a Zen 4). Here each formula runs on
blocks of BLOCK elements through a work block of its own, which makes them `in_place`: the fusion pass then
runs them on each band of the convolution's output while it is still in the cache (runtime/fusion.py).

SiLU is also computed in fewer passes, as x / (1 + 2^(-x log2 e)): 36 us per 64K floats on one core here, the
reference's overflow-free x * sigmoid(x) 81 us (numpy's float32 exp2 takes half the time of its exp). e^-x
overflows to inf below x = -88, where x / inf gives the -0 that x * sigmoid(x) rounds to anyway (and NaN at
-inf, as the reference gives).

ReLU is np.clip(x, 0, inf) here: np.maximum against a scalar ran 2.6x slower than clip (25 against 9.5 us per
64K floats), and ReLU follows most convolutions of ResNets and RegNets.
"""

from __future__ import annotations

import numpy as np

from kuiper.cpu.elementwise import BLOCK, BlockedElementwise, shares
from kuiper.cpu.registry import fast
from kuiper.layers.hardsigmoid import hardsigmoid
from kuiper.layers.hardswish import Hardswish
from kuiper.layers.relu import ReLU
from kuiper.layers.silu import SiLU

LOG2_E = 1.4426950408889634  # e^y = 2^(y log2 e)


class ThroughWorkBlock(BlockedElementwise):
    """`formula(x, out, work)` on blocks, through a work block: in place. Put it before the reference class."""

    in_place = True

    def formula(self, x, out, work) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement formula")

    def apply(self, x, out):
        if x.size <= BLOCK or not (x.flags.c_contiguous and out.flags.c_contiguous):
            # a block, or a part of a fused convolution's output that is not one run of memory (some channels'
            # bands): on this thread, in pieces that fit one work block
            self._pieces(x, out, np.empty(min(x.size, BLOCK), x.dtype))
            return
        x, out = x.reshape(-1), out.reshape(-1)

        def share(span):  # a whole output handed over at once (a 1x1 convolution's): shared over the threads
            work = np.empty(BLOCK, x.dtype)
            for start in range(span.start, span.stop, BLOCK):
                stop = min(start + BLOCK, span.stop)
                self.formula(x[start:stop], out[start:stop], work[:stop - start])
        shares(out.size, share)

    def _pieces(self, x, out, work) -> None:
        """The formula on slices along the first axis of at most BLOCK elements each (or, where one slice along
        it is larger, on the pieces of each slice)."""
        if x.size <= BLOCK:
            self.formula(x, out, work[:x.size].reshape(x.shape))
            return
        inner = x.size // len(x)
        if inner > BLOCK:
            for i in range(len(x)):
                self._pieces(x[i], out[i], work)
            return
        step = BLOCK // inner
        for i in range(0, len(x), step):
            self.formula(x[i:i + step], out[i:i + step], work[:x[i:i + step].size].reshape(x[i:i + step].shape))


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
