"""Adaptive 2-D average and max pooling: the output size is given, the windows ("bins") follow from it.

Along an axis of length `size` pooled to `out` bins, bin i covers [floor(i*size/out), ceil((i+1)*size/out)):
the bins tile the axis exactly when `out` divides `size`, and overlap by a position otherwise.

A 2-D bin is a range of rows times a range of columns, so pooling is separable: reduce the bins along one
axis, then along the other. Along one axis the bins are written as taps, like upsampling's: index[t, i] is
the t-th position of bin i. Forward then gathers one tap of every bin at once (np.take) and folds it in, so it
costs as many whole-array operations as the longest bin has positions, not one per output. A 1x1 output
(global pooling) is a single reduction over H and W instead. AdaptiveAvgPool1d pools (N, C, L) as the 2-D
pooling of its (N, C, 1, L) view (transformers' Swin pools its tokens so). The OpenCL forward:
kuiper/opencl/adaptive_pool.py.
"""

from __future__ import annotations

import functools

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.conv1d import with_height
from kuiper.layers.registry import register


def adaptive_bins(size: int, out_size: int) -> list:
    """PyTorch's adaptive pooling bins along one axis, as (start, end) pairs."""
    return [(i * size // out_size, -(-(i + 1) * size // out_size)) for i in range(out_size)]


@functools.lru_cache(maxsize=256)
def bin_taps(size: int, out_size: int) -> tuple:
    """The bins along one axis as (index, weight), both (taps, out_size). A bin shorter than the longest
    repeats its last position, which changes no maximum and gets weight 0; the others weigh 1 / bin length."""
    start, end = np.array(adaptive_bins(size, out_size)).T
    length = end - start
    tap = np.arange(length.max())[:, None]
    index = start + np.minimum(tap, length - 1)
    weight = np.where(tap < length, 1 / length, 0).astype(np.float32)
    index.flags.writeable = weight.flags.writeable = False  # shared by every caller through the cache
    return index, weight


def max_over_taps(x: np.ndarray, index: np.ndarray, axis: int, labels: np.ndarray | None = None) -> tuple:
    """The maximum over the taps index[t] along `axis` (counted from the end). With `labels`, an int64 array
    that broadcasts against x, also the label where the maximum is: at the first maximum, or the last NaN,
    as PyTorch's scan picks them (None without labels)."""
    best = np.take(x, index[0], axis=axis)
    label = None
    if labels is not None:
        label = np.empty(best.shape, dtype=np.int64)
        label[...] = np.take(labels, index[0], axis=axis)
    for tap in index[1:]:
        candidate = np.take(x, tap, axis=axis)
        if labels is not None:
            better = (candidate > best) | np.isnan(candidate)  # strictly greater: an equal value later loses
            label += better * (np.take(labels, tap, axis=axis) - label)  # a branch-free label[better] = ...
        np.maximum(best, candidate, out=best)
    return best, label


def mean_over_taps(x: np.ndarray, index: np.ndarray, weight: np.ndarray, axis: int, out=None) -> np.ndarray:
    """The mean over the taps index[t] along `axis` (counted from the end): the sum of a bin's own positions
    times 1 / its length (weight[0]). The repeated last position of a shorter bin (weight 0) is skipped, not
    multiplied by 0, which would turn an infinite input into NaN where PyTorch's mean keeps it infinite."""
    shape = weight.shape[:2] + (1,) * (-1 - axis)  # broadcast along `axis`
    total = np.take(x, index[0], axis=axis)
    for tap, tap_weight in zip(index[1:], weight[1:]):
        np.add(total, np.take(x, tap, axis=axis), out=total, where=tap_weight.reshape(shape[1:]) != 0)
    return np.multiply(total, weight[0].reshape(shape[1:]), out=out)


class AdaptivePool2d(Layer):
    """Shared by average and max: the output_size parameter, shape inference and global pooling."""

    #: the numpy reduction for global pooling, called as reduction(x, axis=(-2, -1), out=...)
    reduction: staticmethod

    def __init__(self, op):
        super().__init__(op)
        # pnnx writes a None entry of output_size ("keep this input size") as 0
        self.output_size = self.read_output_size()
        if min(self.output_size) < 0:
            raise self.error(f"output_size must not be negative, got {self.output_size}")

    def read_output_size(self) -> tuple:
        return self.ints_param("output_size", 2)

    def output_hw(self, input_shape: tuple) -> tuple:
        return tuple(o or size for o, size in zip(self.output_size, input_shape[-2:]))

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) not in (3, 4) or min(shape[-2:]) < 1:
            raise self.shape_error(f"expects a non-empty (C, H, W) or (N, C, H, W) input, got {shape}")
        return [shape[:-2] + self.output_hw(shape)] * len(self.op.output_operands)

    def forward_numpy(self, inputs, outputs):
        x = inputs[0]
        out_h, out_w = self.output_hw(x.shape)
        if (out_h, out_w) == (1, 1) and len(outputs) == 1:
            self.reduction(x, axis=(-2, -1), out=outputs[0][..., 0, 0])
        else:
            self.pool_bins(x, bin_taps(x.shape[-2], out_h), bin_taps(x.shape[-1], out_w), outputs)

    def pool_bins(self, x, row_taps, col_taps, outputs):
        """Pool x into the bins given as (index, weight) taps along H and along W."""
        raise NotImplementedError


@register("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d")
class AdaptiveAvgPool2d(AdaptivePool2d):
    reduction = staticmethod(np.mean)

    def pool_bins(self, x, row_taps, col_taps, outputs):
        by_rows = mean_over_taps(x, *row_taps, axis=-2)
        mean_over_taps(by_rows, *col_taps, axis=-1, out=outputs[0])


@register("nn.AdaptiveAvgPool1d", "F.adaptive_avg_pool1d")
class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    def read_output_size(self) -> tuple:
        return (1, *self.ints_param("output_size", 1))

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) not in (2, 3) or shape[-1] < 1:
            raise self.shape_error(f"expects a non-empty (C, L) or (N, C, L) input, got {shape}")
        return [shape[:-1] + self.output_hw(with_height(shape))[1:]]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        super().forward_numpy([x.reshape(with_height(x.shape))], [out.reshape(with_height(out.shape))])


@register("nn.AdaptiveMaxPool2d", "F.adaptive_max_pool2d")
class AdaptiveMaxPool2d(AdaptivePool2d):
    """With return_indices (which pnnx always sets on F.adaptive_max_pool2d), a second int64 output holds
    where each maximum came from, as a flat h * W + w index into its input plane."""

    reduction = staticmethod(np.max)

    def __init__(self, op):
        super().__init__(op)
        self.return_indices = self.bool_param("return_indices", False)
        expected = 2 if self.return_indices else 1
        if len(op.output_operands) != expected:
            raise self.error(f"return_indices={self.return_indices} needs {expected} output(s), "
                             f"the graph gives {len(op.output_operands)}")

    def output_dtypes(self, input_dtypes):
        return [input_dtypes[0], np.dtype(np.int64)][: len(self.op.output_operands)]

    def pool_bins(self, x, row_taps, col_taps, outputs):
        (rows, _), (cols, _) = row_taps, col_taps
        if not self.return_indices:
            # rows first: gathering whole rows is the cheaper gather, and shrinks the array the most
            by_rows, _ = max_over_taps(x, rows, axis=-2)
            outputs[0][...], _ = max_over_taps(by_rows, cols, axis=-1)
            return
        # columns first (per row, each column bin's maximum and its column), then rows: row by row, then
        # column by column, is the order PyTorch scans a bin in, so the first maximum found is PyTorch's
        height, width = x.shape[-2:]
        by_cols, col = max_over_taps(x, cols, axis=-1, labels=np.arange(width))
        flat_index = np.arange(height)[:, None] * width + col
        outputs[0][...], outputs[1][...] = max_over_taps(by_cols, rows, axis=-2, labels=flat_index)
