"""Resizing an (N, C, H, W) image: nearest, nearest-exact, bilinear and bicubic interpolation.

All four modes are separable: every output row is a weighted sum of a few input rows ("taps"), then every
output column a weighted sum of a few columns of that result. So each axis gets a small plan, index[t, o] and
weight[t, o] for tap t of output position o, computed once per (input size, output size) exactly as
PyTorch's CPU kernels compute them (in float32), and forward is a gather plus a multiply-add per tap.

Output size: `size` when given, otherwise floor(input size * scale_factor). Where output position o samples
the input depends on the scale too: PyTorch uses 1 / scale_factor when the scale was given (and not
recomputed), and input size / output size otherwise; with align_corners, (input - 1) / (output - 1).
The OpenCL forward: kuiper/opencl/upsample.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

MODES = ("nearest", "nearest-exact", "bilinear", "bicubic")

#: the cubic convolution kernel's parameter in PyTorch (and OpenCV)
CUBIC_A = np.float32(-0.75)


def source_scale(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> np.float32:
    """Input pixels per output pixel (PyTorch's area_pixel_compute_scale), in float32 as the kernels use."""
    if align_corners:
        return np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
    if scale is not None:
        return np.float32(1.0 / scale)
    return np.float32(in_size) / np.float32(out_size)


def nearest_taps(in_size, out_size, scale, exact):
    """One tap: the input position each output copies. nearest: floor(o * s); nearest-exact: floor((o + .5) * s)."""
    o = np.arange(out_size)
    if exact:
        # computed in double, then rounded to float32 before the floor, like floorf((o + 0.5) * scale)
        src = np.floor(((o + 0.5) * source_scale(in_size, out_size, False, scale)).astype(np.float32))
    elif out_size == in_size:  # PyTorch's exact shortcuts for scale 1 and 2, whatever scale_factor says
        src = o
    elif out_size == 2 * in_size:
        src = o // 2
    else:
        src = np.floor(o.astype(np.float32) * source_scale(in_size, out_size, False, scale))
    return np.minimum(src, in_size - 1).astype(np.intp)[None], None


def source_positions(in_size, out_size, align_corners, scale):
    """Where each output position sits on the input axis (area_pixel_compute_source_index), in float32."""
    o = np.arange(out_size, dtype=np.float32)
    s = source_scale(in_size, out_size, align_corners, scale)
    return s * o if align_corners else s * (o + np.float32(0.5)) - np.float32(0.5)


def floor_and_fraction(real, in_size):
    """PyTorch's guard_index_and_lambda: the input position left of `real`, and how far past it `real` is."""
    left = np.minimum(np.floor(real), in_size - 1)
    return left.astype(np.intp), np.clip(real - left, 0, 1).astype(np.float32)


def linear_taps(in_size, out_size, align_corners, scale):
    """Two taps: the input positions either side of the source position, weighted by closeness."""
    if out_size == in_size:  # PyTorch copies when the size does not change, whatever scale_factor says
        o = np.arange(out_size)
        return np.stack([o, o]), np.stack([np.ones(out_size, np.float32), np.zeros(out_size, np.float32)])
    # positions left of the first pixel centre read pixel 0 (OpenCV's rule, followed by PyTorch)
    left, frac = floor_and_fraction(np.maximum(source_positions(in_size, out_size, align_corners, scale), 0),
                                    in_size)
    right = np.minimum(left + 1, in_size - 1)
    return np.stack([left, right]), np.stack([1 - frac, frac])


def cubic_taps(in_size, out_size, align_corners, scale):
    """Four taps: input positions left-1 .. left+2 (clamped to the edge), with cubic convolution weights."""
    left, t = floor_and_fraction(source_positions(in_size, out_size, align_corners, scale), in_size)
    a = CUBIC_A
    near = [t, 1 - t]  # distances to the two inner taps, which are < 1
    far = [t + 1, 2 - t]  # distances to the two outer taps, between 1 and 2
    inner = [((a + 2) * d - (a + 3)) * d * d + 1 for d in near]
    outer = [((a * d - 5 * a) * d + 8 * a) * d - 4 * a for d in far]
    index = np.clip(left + np.arange(-1, 3)[:, None], 0, in_size - 1)
    return index, np.stack([outer[0], inner[0], inner[1], outer[1]]).astype(np.float32)


@functools.lru_cache(maxsize=256)
def axis_taps(mode: str, in_size: int, out_size: int, align_corners: bool, scale: float | None) -> tuple:
    """(index, weight) for one axis, both (taps, out_size); weight None means one tap of weight 1."""
    if mode in ("nearest", "nearest-exact"):
        index, weight = nearest_taps(in_size, out_size, scale, exact=mode == "nearest-exact")
    elif mode == "bilinear":
        index, weight = linear_taps(in_size, out_size, align_corners, scale)
    else:
        index, weight = cubic_taps(in_size, out_size, align_corners, scale)
    for array in (index, weight):
        if array is not None:
            array.flags.writeable = False  # shared by every caller through the cache
    return index, weight


def resample_axis(x, index, weight, axis, out=None):
    """out[..., o, ...] = sum over taps t of weight[t, o] * x[..., index[t, o], ...] along `axis`."""
    if weight is None:
        return np.take(x, index[0], axis=axis, out=out, mode="clip")  # indices are in range: skip the check
    weight = weight.reshape(weight.shape[:2] + (1,) * (x.ndim - 1 - axis % x.ndim))  # broadcast along `axis`
    result = np.multiply(np.take(x, index[0], axis=axis), weight[0], out=out)
    for t in range(1, len(index)):
        tap = np.take(x, index[t], axis=axis)
        tap *= weight[t]
        result += tap
    return result


@register("nn.Upsample", "F.upsample", "F.interpolate", "F.upsample_nearest", "F.upsample_bilinear")
class Upsample(Layer):
    #: the deprecated helpers imply their mode and align_corners, and pnnx writes neither for them
    HELPER_DEFAULTS = {"F.upsample_nearest": ("nearest", False), "F.upsample_bilinear": ("bilinear", True)}

    def __init__(self, op):
        super().__init__(op)
        mode, align_corners = self.HELPER_DEFAULTS.get(op.type, ("nearest", False))
        self.mode = self.str_param("mode", mode, choices=MODES)
        # pnnx leaves align_corners out (or writes None) for the nearest modes
        self.align_corners = (align_corners if self.param("align_corners", None) is None
                              else self.bool_param("align_corners"))
        if self.align_corners and self.mode.startswith("nearest"):
            raise self.error(f"align_corners=True cannot be used with mode={self.mode}")
        if self.param("antialias", False):
            raise self.error("antialias=True is not supported")

        has_size = self.param("size", None) is not None
        if has_size == (self.param("scale_factor", None) is not None):
            raise self.error("exactly one of size and scale_factor must be given")
        self.size = self.ints_param("size", 2) if has_size else None
        self.scale_factor = None if has_size else self.floats_param("scale_factor", 2)
        if min(self.size or self.scale_factor) <= 0:
            raise self.error(f"the output size must be positive, got {self.size or self.scale_factor}")
        # the scales the kernel samples with: none (sizes ratio) for a given size or a recomputed scale
        recompute = self.param("recompute_scale_factor", None)
        self.kernel_scales = (None, None) if has_size or recompute else self.scale_factor

    def output_hw(self, input_shape: tuple) -> tuple:
        if self.size is not None:
            return self.size
        scaled = [size * scale for size, scale in zip(input_shape[-2:], self.scale_factor)]
        if not all(map(math.isfinite, scaled)):  # a finite scale_factor can still overflow a float
            raise self.shape_error(f"scale_factor={self.scale_factor} makes {input_shape[-2:]} too large to count")
        return tuple(math.floor(s) for s in scaled)

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        if len(shape) != 4:
            raise self.shape_error(f"expects an (N, C, H, W) input, got {shape}")
        out_hw = self.output_hw(shape)
        if min(shape[-2:]) < 1 or min(out_hw) < 1:
            raise self.shape_error(f"cannot resize {shape} to {out_hw}")
        return [shape[:2] + tuple(out_hw)]

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        (rows, row_weights), (cols, col_weights) = (
            axis_taps(self.mode, in_size, out_size, self.align_corners, scale)
            for in_size, out_size, scale in zip(x.shape[2:], out.shape[2:], self.kernel_scales)
        )
        resample_axis(resample_axis(x, rows, row_weights, axis=2), cols, col_weights, axis=3, out=out)
