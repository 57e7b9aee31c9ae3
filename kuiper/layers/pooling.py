"""2-D max and average pooling: slide a window over H and W and reduce what it covers.

Along one axis, window `o` starts at input position `o * stride - padding`, and its `kernel` taps lie
`dilation` apart. Rather than visiting the output positions one by one, forward visits the kernel's taps:
tap j of every window along W is one strided view of the input, so a pass along an axis is `kernel` whole-
array operations. Max and sum are separable, so pooling is two such passes: each input row's windows along
W, then those results' windows along H (kernel_h + kernel_w operations instead of kernel_h * kernel_w).
Padding is never built: a tap only updates the outputs whose tap falls inside the input, which is how
PyTorch ignores padded positions (max pooling) or counts them only in the divisor (average pooling).

The channel planes are independent: the numpy backend's fast version (kuiper/cpu/pooling.py) shares them
out over kuiper's threads. The OpenCL forward: kuiper/opencl/pooling.py.
"""

from __future__ import annotations

import functools

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register


def pooled_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """How many windows fit along an axis of length `size` (PyTorch's pooling_output_shape)."""
    span = dilation * (kernel - 1) + 1
    count = (size + 2 * padding - span + (stride - 1 if ceil_mode else 0)) // stride + 1
    # ceil_mode may add a last window that starts in the right padding: PyTorch drops it
    if ceil_mode and (count - 1) * stride >= size + padding:
        count -= 1
    return count


@functools.lru_cache(maxsize=256)
def axis_taps(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> tuple:
    """For each kernel tap along one axis, (output slice, input slice): the outputs whose tap lands inside
    the input, and the input positions they read. Taps that only ever read padding are left out."""
    out_size = pooled_size(size, kernel, stride, padding, dilation, ceil_mode)
    taps = []
    for k in range(kernel):
        offset = k * dilation - padding  # input position this tap reads for output 0
        first = max(0, -(offset // stride))  # ceil(-offset / stride): the first output reading position >= 0
        last = min(out_size - 1, (size - 1 - offset) // stride)
        if first <= last:
            start = first * stride + offset
            taps.append((slice(first, last + 1), slice(start, start + (last - first) * stride + 1, stride)))
    return tuple(taps)


@functools.lru_cache(maxsize=256)
def axis_window_sizes(size: int, kernel: int, stride: int, padding: int, ceil_mode: bool,
                      count_padding: bool) -> np.ndarray:
    """How many positions each average-pooling window along one axis divides by: those inside the input,
    plus, with count_padding, those in the padding (never the part of a ceil_mode window past the padding)."""
    start = np.arange(pooled_size(size, kernel, stride, padding, 1, ceil_mode)) * stride - padding
    end = np.minimum(start + kernel, size + padding)
    if not count_padding:
        start, end = np.maximum(start, 0), np.minimum(end, size)
    sizes = (end - start).astype(np.float32)
    sizes.flags.writeable = False  # shared by every caller through the cache
    return sizes


class Pool2d(Layer):
    """What max and average pooling share: the window parameters, shape inference and the tap passes."""

    #: whether the type has a dilation parameter (average pooling has none)
    has_dilation: bool
    #: the value an output starts from before the first tap (the reduction's identity)
    start_value: float
    #: the ufunc that folds one tap into the outputs
    combine: np.ufunc

    def __init__(self, op):
        super().__init__(op)
        self.kernel = self.ints_param("kernel_size", 2)
        # F.max_pool2d / F.avg_pool2d write stride=None when the call left it to default to the kernel size
        self.stride = self.kernel if self.param("stride", None) in (None, [], ()) else self.ints_param("stride", 2)
        self.padding = self.ints_param("padding", 2, default=0)
        self.dilation = self.ints_param("dilation", 2, default=1) if self.has_dilation else (1, 1)
        self.ceil_mode = self.bool_param("ceil_mode", False)
        for name in ("kernel", "stride", "dilation"):
            if min(getattr(self, name)) < 1:
                raise self.error(f"{name} must be positive, got {getattr(self, name)}")
        if any(not 0 <= p <= k // 2 for p, k in zip(self.padding, self.kernel)):
            raise self.error(f"padding {self.padding} must be between 0 and half the kernel size {self.kernel}")

    def window_args(self, size: int, axis: int) -> tuple:
        """The window geometry along `axis`, in the argument order of pooled_size and axis_taps."""
        return size, self.kernel[axis], self.stride[axis], self.padding[axis], self.dilation[axis], self.ceil_mode

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) not in (3, 4):
            raise self.shape_error(f"expects a (C, H, W) or (N, C, H, W) input, got {shape}")
        out_hw = tuple(pooled_size(*self.window_args(size, axis)) for axis, size in enumerate(shape[-2:]))
        if min(out_hw) < 1:
            raise self.shape_error(f"input {shape} is too small for kernel {self.kernel} with padding "
                                   f"{self.padding} and dilation {self.dilation}: the output would be {out_hw}")
        return [shape[:-2] + out_hw]

    def forward_numpy(self, inputs, outputs):
        self.pool_planes(inputs[0], outputs[0])

    def pool_planes(self, x, out):
        """Pool a stack of (H, W) planes (any leading dims): along W into a temporary, then along H into out."""
        rows = np.empty(x.shape[:-1] + out.shape[-1:], dtype=x.dtype)  # every input row pooled along W
        self.pool_axis(rows, x, -1)
        self.pool_axis(out, rows, -2)

    def pool_axis(self, out, x, axis: int) -> None:
        """Pool x along one axis (-1: W, -2: H) into out, tap by tap."""
        after = (slice(None),) * (-1 - axis)  # the axes behind the pooled one
        out.fill(self.start_value)
        for out_part, in_part in axis_taps(*self.window_args(x.shape[axis], axis + 2)):
            window_tap = out[(..., out_part, *after)]
            self.combine(window_tap, x[(..., in_part, *after)], out=window_tap)


@register("nn.MaxPool2d", "F.max_pool2d")
class MaxPool2d(Pool2d):
    has_dilation = True
    # an output none of whose taps reaches the input (possible with dilation) stays -inf, as in PyTorch
    start_value = -np.inf
    combine = np.maximum

    def __init__(self, op):
        super().__init__(op)
        if self.bool_param("return_indices", False):
            raise self.error("return_indices=True is not supported")


@register("nn.AvgPool2d", "F.avg_pool2d")
class AvgPool2d(Pool2d):
    has_dilation = False
    start_value = 0.0
    combine = np.add

    def __init__(self, op):
        super().__init__(op)
        self.count_include_pad = self.bool_param("count_include_pad", True)
        self.divisor_override = self.param("divisor_override", None)
        if self.divisor_override is not None and self.int_param("divisor_override") == 0:
            raise self.error("divisor_override must not be 0")

    def pool_planes(self, x, out):
        super().pool_planes(x, out)  # window sums
        if self.divisor_override is not None:
            out /= self.divisor_override
        else:
            rows, cols = (
                axis_window_sizes(size, self.kernel[a], self.stride[a], self.padding[a], self.ceil_mode,
                                  self.count_include_pad)
                for a, size in enumerate(x.shape[-2:])
            )
            out /= np.outer(rows, cols)
