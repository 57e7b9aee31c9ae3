"""Identity (nn.Identity, and dropout, which does nothing at inference): copy the input through.

pnnx removes these operators when it exports; they are registered for graphs written by other tools.
"""

from kuiper.layers.registry import register
from kuiper.layers.reshape import ViewLayer


@register("nn.Identity", "nn.Dropout", "nn.Dropout2d", "F.dropout")
class Identity(ViewLayer):
    # nn.Dropout's p and inplace, F.dropout's p, training and inplace: nothing at inference, where dropout
    # passes its input through (the one type of layer for which pnnx writes parameters kuiper has no use for)
    harmless_params = frozenset({"p", "training", "inplace"})

    def output_shapes(self, input_shapes):
        return [tuple(input_shapes[0])]
