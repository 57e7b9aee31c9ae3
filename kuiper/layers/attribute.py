"""pnnx.Attribute: a constant tensor stored in the .bin (`@data`), e.g. a learned bias added in forward.

The numpy forward copies it into the output. On OpenCL it is uploaded once (kuiper/opencl/attribute.py).
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


@register("pnnx.Attribute")
class Attribute(Layer):
    num_inputs = 0

    def __init__(self, op):
        super().__init__(op)
        if len(op.attrs) != 1:
            raise self.error(f"expects exactly one constant '@data', found {sorted(op.attrs) or 'none'}")
        (attr,) = op.attrs.values()
        self.value = np.ascontiguousarray(attr.numpy())

    def output_shapes(self, input_shapes):
        return [self.value.shape]

    def output_dtypes(self, input_dtypes):
        return [self.value.dtype]

    def forward_numpy(self, inputs, outputs):
        outputs[0][...] = self.value
