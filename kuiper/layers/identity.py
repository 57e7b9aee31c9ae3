"""Identity (nn.Identity, and dropout, which does nothing at inference): copy the input through.

pnnx removes these operators when it exports; they are registered for graphs written by other tools.
"""

from kuiper.layers.registry import register
from kuiper.layers.reshape import ViewLayer


@register("nn.Identity", "nn.Dropout", "nn.Dropout2d", "F.dropout")
class Identity(ViewLayer):
    def output_shapes(self, input_shapes):
        return [tuple(input_shapes[0])]
