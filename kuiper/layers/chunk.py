"""Chunk (torch.chunk): cut the input along dim into at most `chunks` pieces.

PyTorch's rule: every piece has ceil(length / chunks) elements, the last one what is left. So 7 in 3 chunks
is 3,3,1 and 6 in 4 chunks is 2,2,2 -- three pieces, not four; pnnx writes one output per actual piece.
"""

from kuiper.layers.registry import register
from kuiper.layers.split import SplitLayer, equal_pieces


@register("torch.chunk")
class Chunk(SplitLayer):
    def __init__(self, op):
        super().__init__(op)
        self.chunks = self.int_param("chunks")
        if self.chunks <= 0:
            raise self.error(f"chunks={self.chunks} must be > 0")

    def sizes(self, length):
        # max(1, ...): an empty dim yields no pieces instead of a zero step
        return equal_pieces(length, max(1, -(-length // self.chunks)))
