"""Flatten (torch.flatten, nn.Flatten): merge the dims start_dim..end_dim into one."""

import math

from kuiper.layers.registry import register
from kuiper.layers.reshape import ViewLayer, dim_index


@register("torch.flatten", "nn.Flatten")
class Flatten(ViewLayer):
    def __init__(self, op):
        super().__init__(op)
        # the defaults differ: nn.Flatten keeps the batch dim, torch.flatten merges everything
        self.start_dim = self.int_param("start_dim", 1 if op.type == "nn.Flatten" else 0)
        self.end_dim = self.int_param("end_dim", -1)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        start = dim_index(self, self.start_dim, len(shape))
        end = dim_index(self, self.end_dim, len(shape))
        if start > end:
            raise self.shape_error(
                f"start_dim={self.start_dim} comes after end_dim={self.end_dim} for a {shape} input")
        return [shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:]]
