"""Operators pnnx has no name of its own for, which it writes as the TorchScript `aten::` op with positional
inputs: aten::clamp_min and aten::clamp_max with a tensor bound (swin_v2's normalized attention clamps its
norms with `aten::clamp_min` at a 1e-12 written as a constant pnnx.Expression), and aten::zero, a tensor of
zeros shaped like its input (Tensor.zero_: swin_v2 zeroes the key's part of its qkv bias). pnnx 20261020
writes that last one wrongly: the zeroed third of the bias is all the bias its F.linear gets, so torchvision's
swin_v2 models stop at F.linear's shape check ("bias (96,) does not broadcast to the output (..., 288)").
aten::addcmul(x, t1, t2, value) is x + value * t1 * t2.

The two clamps and addcmul are element-wise with broadcasting: they are pnnx.Expressions with a fixed formula, and run
as those do on every backend. The OpenCL forwards are kuiper/opencl/aten.py.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.expression import Expression
from kuiper.layers.expression_parser import ExpressionSyntaxError, Literal, parse
from kuiper.layers.registry import register


class TensorBound(Expression):
    """aten::clamp_min(x, bound) and aten::clamp_max(x, bound), the bound broadcast against x."""

    num_inputs = 2

    def output_dtypes(self, input_dtypes):
        # PyTorch keeps the input's dtype: a bound (often a 0-d constant) only makes integers floats
        x, bound = input_dtypes
        return [np.dtype(np.float32) if x.kind in "biu" and bound.kind == "f" else x]


@register("aten::clamp_min")
class ClampMin(TensorBound):
    """max(x, min): NaN in either stays NaN, as in PyTorch."""

    formula = "max(@0,@1)"


@register("aten::clamp_max")
class ClampMax(TensorBound):
    formula = "min(@0,@1)"


@register("aten::addcmul")
class Addcmul(Expression):
    """aten::addcmul(x, t1, t2, value): x + value * t1 * t2, all four broadcast together. ConvNeXt V2's global
    response norm adds its bias this way.

    PyTorch's value is a Scalar, which pnnx writes as a constant pnnx.Expression (`expr=1`, an int64 0-d
    tensor): its literal goes into the formula, so that it neither promotes the float32 tensors nor reaches a
    float32 kernel as an int64 input. Any other value input stays the formula's @3."""

    num_inputs = 4

    def __init__(self, op):
        value = constant_literal(op.input_operands[3]) if len(op.input_operands) == 4 else None
        self.formula = f"add(@0,mul({value or '@3'},mul(@1,@2)))"
        super().__init__(op)


def constant_literal(operand) -> str | None:
    """The number a constant pnnx.Expression writes into `operand` (`expr=1`), as written; else None."""
    producer = operand.producer
    if producer is None or producer.type != "pnnx.Expression" or producer.input_operands:
        return None
    text = getattr(producer.params.get("expr"), "value", None)
    try:
        return text if isinstance(text, str) and isinstance(parse(text), Literal) else None
    except ExpressionSyntaxError:  # the producer's own layer says what is wrong with it
        return None


@register("aten::zero")
class Zero(Layer):
    def output_shapes(self, input_shapes):
        return [tuple(input_shapes[0])]

    def forward_numpy(self, inputs, outputs):
        outputs[0][...] = 0
