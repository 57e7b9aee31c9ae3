"""Squeeze (torch.squeeze): drop size-1 dims -- the given ones (dim=d or dim=(d, ...)), or all of them.

As in PyTorch, a given dim whose size is not 1 stays, and without dim every size-1 dim goes, the batch too
when it is 1.
"""

from kuiper.layers.registry import register
from kuiper.layers.reshape import ViewLayer, dim_index


@register("torch.squeeze")
class Squeeze(ViewLayer):
    def __init__(self, op):
        super().__init__(op)
        dim = self.param("dim", None)
        if dim is None:
            self.dims = None
        elif isinstance(dim, (list, tuple)):
            self.dims = self.ints_param("dim")
        else:
            self.dims = (self.int_param("dim"),)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if self.dims is None:
            axes = set(range(len(shape)))
        else:
            axes = {dim_index(self, d, len(shape)) for d in self.dims}
        return [tuple(n for i, n in enumerate(shape) if not (i in axes and n == 1))]
