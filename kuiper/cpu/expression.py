"""The fast pnnx.Expression: its program run over kuiper's threads, a span of the elements each, epilogue and all.

Where every operand has the output's shape (a residual add), element k of the output reads only element k
of each operand, so each thread runs the program on its own span of the flat arrays (kuiper/cpu/
elementwise.py's `shares`). A fused epilogue (kuiper/layers/fused.py: ReLU after the add) then runs on the
span the thread has just written, not in another pass over the whole output once every thread is done.
The program runs once per span, not per BLOCK as activations do: its per-call cost and the intermediate
arrays it allocates per call make blocks slower.

Where an operand broadcasts, the output is split along its outermost axis longer than 1 instead, each thread
running the program on a slab of it: an operand as long along that axis is sliced with it, one of extent 1 there
(or without the axis) is read whole, and slabs go to threads only as spans do, PART_BLOCKS blocks each: a
squeeze-excitation block's x * scale, (N, C, H, W) by (N, C, 1, 1), gains from slabs on large batches and
images, and EfficientNet-B0's at batch 1 are too small to split. Where an operand or the output is laid out so
that spans of it would be copies, or the slabs are too few for the threads, the program runs on the whole
arrays, as the reference does, and the epilogue after it. docs/tuning.md keeps the timings behind these choices.
"""

from __future__ import annotations

from kuiper.cpu import threads
from kuiper.cpu.elementwise import BLOCK, PART_BLOCKS, shares
from kuiper.cpu.registry import fast
from kuiper.layers.expression import Expression
from kuiper.layers.fused import Epilogue


@fast("pnnx.Expression")
class FastExpression(Expression):
    def forward_numpy(self, inputs, outputs):
        self.forward_epilogue(inputs, outputs, Epilogue([], inputs))

    def forward_epilogue(self, inputs, outputs, epilogue):
        out = outputs[0]
        used = {i: inputs[i] for i in self.operands}
        if not (used and out.flags.c_contiguous and all(x.flags.c_contiguous for x in used.values())):
            self.evaluate(inputs, out)
            epilogue.apply(out)
            return
        if any(x.shape != out.shape for x in used.values()):
            self._slabs(used, out, epilogue)
            return
        flat = {i: x.reshape(-1) for i, x in used.items()}
        flat_out = out.reshape(-1)
        epilogue = epilogue.reshaped((-1,))  # the tensors it adds have the output's shape: flat spans too

        def share(span):
            self.evaluate({i: x[span] for i, x in flat.items()}, flat_out[span])
            epilogue.apply(flat_out[span], span)
        shares(out.size, share)

    def _slabs(self, used: dict, out, epilogue) -> None:
        """The program on slabs of the output along its outermost axis longer than 1, one run per thread."""
        axis = next((a for a, extent in enumerate(out.shape) if extent > 1), 0)
        slab = out.size // max(1, out.shape[axis])  # elements of one index along the axis
        # an operand's own axis at `axis` (shapes align at the end), where it runs along the output's
        along = {i: x.ndim - out.ndim + axis for i, x in used.items()
                 if x.ndim - out.ndim + axis >= 0 and x.shape[x.ndim - out.ndim + axis] == out.shape[axis]}

        def part(first, stop, _):
            where = (slice(None),) * axis + (slice(first, stop),)
            sliced = {i: x[(slice(None),) * along[i] + (slice(first, stop),)] if i in along else x
                      for i, x in used.items()}
            self.evaluate(sliced, out[where])
            epilogue.apply(out[where], where)
        threads.parallel(part, out.shape[axis], grain=-(-PART_BLOCKS * BLOCK // max(1, slab)))
