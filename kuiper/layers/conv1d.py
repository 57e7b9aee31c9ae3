"""Conv1d: 1-D convolution over (N, C, L), computed as a Conv2d over (N, C, 1, L).

A kernel of k taps along L is a 1 x k kernel over a map of height 1: stride, dilation and padding act on the
width only, and no tap ever reaches past the single row. So the layer reads its own 1-D parameters, checks them,
and hands an equivalent 2-D operator to the backend's Conv2d (`conv2d_class`: this module's reference one; the
OpenCL backend puts its own, kuiper/opencl/conv1d.py), viewing its input and output with the unit height
added. ECA's channel attention (timm's ECA-ResNets) is the case met: a 5-tap convolution along the channels.
"""

from __future__ import annotations

import numpy as np

from kuiper.core.operators import make_operator
from kuiper.layers import conv2d
from kuiper.layers.base import Layer
from kuiper.layers.registry import register


def with_height(shape: tuple) -> tuple:
    """(..., C, L) as (..., C, 1, L)."""
    return (*shape[:-1], 1, shape[-1])


@register("nn.Conv1d")
class Conv1d(Layer):
    #: the Conv2d class that computes
    conv2d_class = conv2d.Conv2d

    def __init__(self, op):
        super().__init__(op)
        params = {"in_channels": self.int_param("in_channels"), "out_channels": self.int_param("out_channels"),
                  "groups": self.int_param("groups", 1), "bias": self.bool_param("bias", True),
                  "padding_mode": self.str_param("padding_mode", "zeros"),
                  "kernel_size": (1, self.one("kernel_size")), "stride": (1, self.one("stride", 1)),
                  "dilation": (1, self.one("dilation", 1))}
        padding = self.param("padding", 0)
        params["padding"] = padding if isinstance(padding, str) else (0, self.one("padding", 0))
        attrs = {}
        weight = self.op.attrs.get("weight")
        if weight is not None:
            if len(weight.shape) != 3:
                raise self.error(f"weight '@weight' has shape {tuple(weight.shape)}, expected (out, in/groups, "
                                 f"kernel)")
            attrs["weight"] = weight.numpy().reshape(with_height(weight.shape))
        if "bias" in self.op.attrs:
            attrs["bias"] = self.op.attrs["bias"].numpy()
        shapes = [None if operand.shape is None else with_height(operand.shape) for operand in op.input_operands]
        # the same type and name: the 2-D layer's errors name this operator
        self.conv = self.conv2d_class(make_operator(op.type, op.name, params, attrs, input_shapes=shapes))

    def one(self, key: str, *default) -> int:
        """A 1-D geometry parameter: one int, or a list of one."""
        return self.ints_param(key, 1, *default)[0]

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) not in (2, 3):
            raise self.shape_error(f"expects input (N, C, L) or (C, L), got {shape}")
        out = self.conv.output_shapes([with_height(shape)])[0]
        return [(*out[:-2], out[-1])]

    def macs(self, input_shapes, output_shapes):
        return self.conv.macs([with_height(input_shapes[0])], [with_height(output_shapes[0])])

    def workspace_bytes(self, input_shapes):
        return self.conv.workspace_bytes([with_height(input_shapes[0])])

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        self.conv.forward_numpy([x.reshape(with_height(x.shape))], [out.reshape(with_height(out.shape))])
