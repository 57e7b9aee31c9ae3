"""Hardswish: x · hardsigmoid(x), MobileNetV3's cheap stand-in for SiLU: 0 below -3, x above 3."""

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.hardsigmoid import hardsigmoid
from kuiper.layers.registry import register


@register("nn.Hardswish", "F.hardswish")
class Hardswish(ElementwiseLayer):

    def apply(self, x, out):
        # x times a factor in [0, 1]; PyTorch's x·relu6(x+3)/6 could overflow at huge x, this cannot
        hardsigmoid(x, out)
        out *= x
