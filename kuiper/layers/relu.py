"""ReLU: max(x, 0), element by element. The simplest layer, and the pattern every other layer follows."""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("nn.ReLU", "F.relu")
class ReLU(Layer):
    def output_shapes(self, input_shapes):
        return [input_shapes[0]]

    def forward_numpy(self, inputs, outputs):
        np.maximum(inputs[0], 0.0, out=outputs[0])
