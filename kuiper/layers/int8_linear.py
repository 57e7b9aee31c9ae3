"""Int8Linear: a Linear whose weights are int8 with one float scale per group of GROUP inputs (weight-only
quantization, as llama.cpp's Q8_0): y = x @ (q * scale).T + b.

Row n of the weights, cut into groups of GROUP consecutive inputs (the last group may be shorter), keeps per
group g the scale s[n, g] = max |w| / 127 over the group and the integers q = round(w / s), in -127..127; the
weight it stands for is q * s, within half a step (s / 2) of w. `quantize` and `dequantize` are that definition;
kuiper/llm/quantize.py quantizes a checkpoint's Linear weights with it as a model loads.

This numpy forward is the reference: it widens the whole matrix to float32 on every call. The numpy backend
(kuiper/cpu/int8_linear.py) and OpenCL (kuiper/opencl/int8_linear.py) read the int8 values themselves.
"""

import copy

import numpy as np

from kuiper.layers.linear import Features
from kuiper.layers.registry import register

#: inputs per scale, as llama.cpp's Q8_0
GROUP = 32
#: the largest magnitude of q: symmetric, so -128 is never used
QMAX = 127


def groups(in_features: int, group: int = GROUP) -> int:
    """How many scales a row of `in_features` weights has."""
    return -(-in_features // group)


def quantize(weight: np.ndarray, group: int = GROUP) -> tuple:
    """(q int8 (out, in), scales float32 (out, groups)) for a float weight matrix (out, in)."""
    weight = np.asarray(weight, dtype=np.float32)
    out, inp = weight.shape
    count = groups(inp, group)
    padded = np.zeros((out, count * group), dtype=np.float32)
    padded[:, :inp] = weight
    blocks = padded.reshape(out, count, group)
    scales = np.abs(blocks).max(axis=2) / QMAX
    # an all-zero group has scale 0: its q is 0 rather than 0 / 0
    ratios = np.divide(blocks, scales[:, :, None], out=np.zeros_like(blocks), where=scales[:, :, None] > 0)
    q = np.rint(ratios).clip(-QMAX, QMAX).astype(np.int8)
    return q.reshape(out, count * group)[:, :inp].copy(), scales.astype(np.float32)


def dequantize(q: np.ndarray, scales: np.ndarray, group: int = GROUP) -> np.ndarray:
    """The float32 weights (out, in) that q and its scales stand for: q * scale, group by group."""
    inp = q.shape[1]
    return q.astype(np.float32) * np.repeat(scales, group, axis=1)[:, :inp]


@register("kuiper.Int8Linear")
class Int8Linear(Features):
    def __init__(self, op):
        super().__init__(op)
        self.group_size = self.int_param("group_size", GROUP)
        if min(self.in_features, self.out_features, self.group_size) < 1:
            raise self.error(f"in_features={self.in_features}, out_features={self.out_features} and "
                             f"group_size={self.group_size} must be >= 1")
        self.qweight = self.int8_weight("qweight", (self.out_features, self.in_features))
        self.scales = self.weight("scales", (self.out_features, groups(self.in_features, self.group_size)))
        self.bias = self.read_bias()

    def int8_weight(self, key: str, shape: tuple) -> np.ndarray:
        """Attribute `key` as it is stored, which must be int8 of this shape."""
        attr = self.op.attrs.get(key)
        if attr is None:
            raise self.error(f"missing weight '@{key}'")
        array = attr.numpy()
        if array.dtype != np.int8 or tuple(array.shape) != tuple(shape):
            raise self.error(f"weight '@{key}' is {tuple(array.shape)} {array.dtype}, expected {tuple(shape)} int8")
        return array

    def joined(self, linears: list, op) -> "Int8Linear":
        """One Int8Linear for `op` doing `linears` (this one first, all on one input, of one group size) side by
        side: their rows of int8 weights, scales and biases one after another. Each then reads its own as views
        of the joined arrays, so that the weights are held once."""
        layer = copy.copy(self)
        layer.op = op
        layer.qweight = np.concatenate([lin.qweight for lin in linears])
        layer.scales = np.concatenate([lin.scales for lin in linears])
        layer.bias = None if self.bias is None else np.concatenate([lin.bias for lin in linears])
        layer.out_features = len(layer.qweight)
        start = 0
        for lin in linears:
            rows = slice(start, start + lin.out_features)
            lin.qweight, lin.scales, start = layer.qweight[rows], layer.scales[rows], rows.stop
        return layer

    def dequantized(self) -> np.ndarray:
        return dequantize(self.qweight, self.scales, self.group_size)

    def forward_numpy(self, inputs, outputs):
        x, out = self.rows(inputs[0], outputs[0])
        np.matmul(x, self.dequantized().T, out=out)
        self.add_bias(out)
