"""The fast element-wise layers: the formula applied to cache-sized blocks, which kuiper's threads share.

A formula of several steps passes over its data several times. On blocks of BLOCK elements (256 KiB of float32)
the passes after the first read the CPU cache instead of memory, which makes a formula of many passes such as
GELU much faster than on whole arrays. `shares` hands each thread its run of whole blocks; the activations
(BlockedElementwise) and pnnx.Expression (kuiper/cpu/expression.py) use it.

Every activation needs the same fast forward, so none registers a fast class of its own: for a type whose
reference layer is an ElementwiseLayer, registry.fast_class makes `Fast<Name>(BlockedElementwise, <Name>)`.
"""

from __future__ import annotations

from kuiper.cpu import threads
from kuiper.layers.elementwise import ElementwiseLayer

BLOCK = 1 << 16
#: each of kuiper's threads takes at least this many blocks, to pay for handing over a part (see
#: cpu/threads.py): a residual add with ReLU over fewer blocks runs faster on one thread (docs/tuning.md)
PART_BLOCKS = 4


def shares(size: int, work) -> None:
    """Call `work(span)` for consecutive slices `span` that cover range(size) once, one per thread: each
    starts at a multiple of BLOCK and holds PART_BLOCKS blocks or more (the last block may be partial)."""
    threads.parallel(lambda first, stop, _: work(slice(first * BLOCK, min(stop * BLOCK, size))),
                     -(-size // BLOCK), grain=PART_BLOCKS)


class BlockedElementwise(ElementwiseLayer):
    """The blocked forward, for any activation: put it before the reference class in the bases."""

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if not out.flags.c_contiguous:  # flat blocks of it would be copies
            super().forward_numpy(inputs, outputs)
            return
        x, out = x.reshape(-1), out.reshape(-1)

        def share(span):  # spans start at a multiple of BLOCK: no block crosses into another thread's share
            for start in range(span.start, span.stop, BLOCK):
                self.apply(x[start:start + BLOCK], out[start:start + BLOCK])
        shares(out.size, share)
