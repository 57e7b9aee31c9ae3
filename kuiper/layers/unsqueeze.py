"""Unsqueeze (torch.unsqueeze): insert a size-1 dim so that it becomes dim `dim` of the output."""

from kuiper.layers.registry import register
from kuiper.layers.reshape import ViewLayer, dim_index


@register("torch.unsqueeze")
class Unsqueeze(ViewLayer):
    def __init__(self, op):
        super().__init__(op)
        self.dim = self.int_param("dim")

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        axis = dim_index(self, self.dim, len(shape) + 1)  # counted in the output, one dim longer
        return [shape[:axis] + (1,) + shape[axis:]]
