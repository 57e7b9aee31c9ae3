"""SiLU (also called swish): x · σ(x), element by element, on the overflow-free sigmoid."""

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register
from kuiper.layers.sigmoid import sigmoid


@register("nn.SiLU", "F.silu")
class SiLU(ElementwiseLayer):

    def apply(self, x, out):
        sigmoid(x, out)
        out *= x
