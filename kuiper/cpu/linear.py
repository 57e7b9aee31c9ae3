"""The numpy backend's Linear: the reference's one GEMM (kuiper/layers/linear.py) shared over kuiper's threads,
with a fused epilogue (kuiper/layers/fused.py: ConvNeXt's and the transformers' GELU, a residual sum) run by each
thread on the rows it has just computed.

Rows (tokens) are split over the threads when every thread gets MIN_ROWS of them and the weights are small:
each thread then multiplies its rows by the whole weight matrix, adds the bias and runs the epilogue, in chunks
of at most CHUNK_BYTES of output, each while it is still in the cache. Otherwise (classifier heads, ConvNeXt's
last stage of 49 tokens, ViT-B's MLP with its 9.4 MB weights) `threads.matmul` splits the GEMM, by columns where
there are enough, and the bias and the epilogue follow on the whole output. docs/tuning.md keeps the timings
behind the constants below.
"""

from __future__ import annotations

import numpy as np

from kuiper.cpu import threads
from kuiper.cpu.registry import fast
from kuiper.layers import linear
from kuiper.layers.fused import Epilogue

#: a thread's part of a row split keeps at least this many rows, as a convolution's band keeps MIN_COLUMNS
#: pixels: fewer rows make GEMMs too thin, and splitting the columns wins
MIN_ROWS = threads.MIN_COLUMNS
#: ... and with weights larger than this, the columns are split: in a row split every thread reads all of them
ROW_SPLIT_WEIGHT_BYTES = 4 << 20
#: a thread's rows run in chunks of at most this much output, about a core's L2 cache, so that the epilogue finds
#: them there; smaller chunks lose more than they gain, as each chunk's GEMM call packs the weights again
CHUNK_BYTES = 1 << 20


@fast("nn.Linear")
class Linear(linear.Linear):
    def forward_numpy(self, inputs, outputs):
        self.forward_epilogue(inputs, outputs, Epilogue([], inputs))

    def forward_epilogue(self, inputs, outputs, epilogue):
        """forward_numpy, and `epilogue` on each chunk of rows right after its bias is added (every row: the rows
        of the tensors a fused sum adds are the output's)."""
        x, out = self.rows(inputs[0], outputs[0]) if not epilogue.steps else \
            (inputs[0].reshape(-1, self.in_features), outputs[0].reshape(-1, self.out_features))
        epilogue = epilogue.reshaped(out.shape)  # the tensors it adds, as rows like the output
        grain = max(MIN_ROWS, -(-threads.MIN_MACS // self.weight_t.size))
        if self.weight_t.nbytes > ROW_SPLIT_WEIGHT_BYTES or threads.parts(len(out), grain) < 2:
            threads.matmul(x, self.weight_t, out)
            self.add_bias(out)
            epilogue.apply(out)
            return

        def part(first, stop, _):
            count = -(-(stop - first) * out[0].nbytes // CHUNK_BYTES)
            bounds = [first + (stop - first) * k // count for k in range(count + 1)]
            for top, bottom in zip(bounds, bounds[1:]):
                chunk = out[top:bottom]
                np.matmul(x[top:bottom], self.weight_t, out=chunk)
                self.add_bias(chunk)
                epilogue.apply(chunk, slice(top, bottom))
        threads.parallel(part, len(out), grain)
