"""The fast pnnx.Expression: its program run over kuiper's threads, a span of the elements each, epilogue and all.

Where every operand has the output's shape (a residual add), element k of the output reads only element k
of each operand, so each thread runs the program on its own span of the flat arrays (kuiper/cpu/
elementwise.py's `shares`). A fused epilogue (kuiper/layers/fused.py: ReLU after the add) then runs on the
span the thread has just written, not in another pass over the whole output once every thread is done.
The program runs once per span, not per BLOCK as activations do: its per-call cost and the intermediate
arrays it allocates per call made blocks slower (2 threads here: add+ReLU over 1x64x112x112 0.34 ms in
blocks, 0.28 in spans; add(mul(@0,2),neg(@1))+ReLU 1.27 ms and 0.57).

Where an operand broadcasts, or is laid out so that flat spans of it would be copies, the program runs on
the whole arrays, as the reference does, and the epilogue after it.
"""

from __future__ import annotations

from kuiper.cpu.elementwise import shares
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
        if not (used and out.flags.c_contiguous
                and all(x.shape == out.shape and x.flags.c_contiguous for x in used.values())):
            self.evaluate(inputs, out)
            epilogue.apply(out)
            return
        flat = {i: x.reshape(-1) for i, x in used.items()}
        flat_out = out.reshape(-1)
        epilogue = epilogue.reshaped((-1,))  # the tensors it adds have the output's shape: flat spans too

        def share(span):
            self.evaluate({i: x[span] for i, x in flat.items()}, flat_out[span])
            epilogue.apply(flat_out[span], span)
        shares(out.size, share)
