"""Padding (F.pad and the padding modules): widen the last dims, or crop them where an amount is negative.

pnnx mostly writes the padding modules as F.pad: nn.ZeroPad1d/2d/3d (`mode=constant value=0.0`),
nn.ConstantPad1d/2d/3d, nn.ReflectionPad1d/2d/3d (`mode=reflect value=None`), nn.ReplicationPad1d/2d/3d
and nn.CircularPad1d/2d/3d, and swin_v2 pads its windows with `F.pad mode=constant pad=(0,0,0,4,0,4)
value=None` (None means 0). `pad` holds a (before, after) pair per dim from the last dim backwards:
(left, right, top, bottom, front, back). Some modules it keeps as they are, timm's BiT stem's
`nn.ConstantPad2d padding=(1,1,1,1) value=0.0` for one: the module's type gives the mode, `padding` the pairs.

Along a dim of n elements padded by (before, after), output position o reads input position i = o - before;
where i falls outside the input, the mode says what goes there:
- constant: `value`;
- replicate: the edge element (i clamped to [0, n - 1]);
- reflect: the mirror image about the edge element, which is not repeated (-1 reads 1, n reads n - 2), so each
  pad must be smaller than n;
- circular: the input repeated, wrapping round to the other end (-1 reads n - 1). PyTorch crops first and
  wraps what is left, so a pad may not exceed the part left after the crop.

The reference gathers with one array of input positions per dim (`source_positions`); constant padding fills
the output and puts the part of the input that stays into its place. The OpenCL forward: kuiper/opencl/pad.py.
"""

import numpy as np

from kuiper.layers.base import Layer
from kuiper.layers.registry import register

#: what F.pad's `mode` may be
MODES = ("constant", "reflect", "replicate", "circular")
#: the padding modules, by the mode they pad in (each in its 1d, 2d and 3d form)
MODULE_MODES = {f"nn.{module}{dims}d": mode for module, mode in (("ZeroPad", "constant"), ("ConstantPad", "constant"),
                ("ReflectionPad", "reflect"), ("ReplicationPad", "replicate"), ("CircularPad", "circular"))
                for dims in (1, 2, 3)}


def kept_part(n: int, before: int, after: int) -> tuple:
    """(the input positions that stay, the output positions they fill) along a dim, as slices."""
    start, stop = max(0, -before), min(n, n + after)
    stop = max(start, stop)
    return slice(start, stop), slice(start + before, stop + before)


def source_positions(mode: str, n: int, before: int, after: int) -> np.ndarray:
    """For each output position along a dim, the input position it reads (reflect, replicate, circular)."""
    i = np.arange(-before, n + after)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "reflect":
        i = np.abs(i)
        return np.where(i < n, i, 2 * (n - 1) - i)
    kept = kept_part(n, before, after)[0]  # circular: what is left after cropping repeats
    return kept.start + (i - kept.start) % (kept.stop - kept.start)


@register("F.pad", *MODULE_MODES)
class Pad(Layer):
    def __init__(self, op):
        super().__init__(op)
        if op.type in MODULE_MODES:
            self.mode = MODULE_MODES[op.type]
            # a single number pads every side of the module's 1, 2 or 3 dims alike
            self.pad = self.ints_param("padding", 2 * int(op.type[-2]))
        else:
            self.mode = self.str_param("mode", "constant", choices=MODES)
            self.pad = self.ints_param("pad")
        if len(self.pad) % 2:
            raise self.error(f"pad={self.pad} must hold a (before, after) pair per dim")
        if self.mode != "constant" and len(self.pad) > 6:
            raise self.error(f"pad={self.pad}: mode {self.mode} pads at most the last 3 dims")
        value = self.param("value", None)
        if self.mode == "constant":
            self.value = 0.0 if value is None else self.float_param("value", finite=False)
        elif value is not None:
            raise self.error(f"value={value} means nothing in mode {self.mode}")

    def amounts(self, shape: tuple) -> list:
        """The (before, after) pair of every dim of a `shape` input, (0, 0) where nothing is padded."""
        padded = len(self.pad) // 2
        if padded > len(shape):
            raise self.shape_error(f"pad={self.pad} pads {padded} dims, the {shape} input has {len(shape)}")
        pairs = [tuple(self.pad[2 * k:2 * k + 2]) for k in reversed(range(padded))]
        return [(0, 0)] * (len(shape) - padded) + pairs

    def placement(self, shape: tuple) -> tuple:
        """(the part of a `shape` input that stays, the part of the output it fills), as numpy indices."""
        return tuple(zip(*(kept_part(n, before, after) for n, (before, after) in zip(shape, self.amounts(shape)))))

    def output_shapes(self, input_shapes):
        shape = tuple(input_shapes[0])
        out = []
        for axis, (n, (before, after)) in enumerate(zip(shape, self.amounts(shape))):
            size = n + before + after
            if size < 0:
                raise self.shape_error(f"pad={self.pad} crops dim {axis} of a {shape} input to size {size}")
            if self.mode != "constant" and (before, after) != (0, 0):
                self.check_readable(axis, n, before, after, size)
            out.append(size)
        return [tuple(out)]

    def check_readable(self, axis, n, before, after, size) -> None:
        """Refuse what PyTorch refuses: pads that would read past what the mode can reach."""
        if size < 1 or n < 1:
            raise self.shape_error(f"mode {self.mode} cannot pad dim {axis} of size {n} to size {size}")
        if self.mode == "reflect" and max(before, after) >= n:
            raise self.shape_error(f"mode reflect: pad ({before}, {after}) of dim {axis} must be smaller than its "
                                   f"size {n}")
        if self.mode == "circular":
            kept = kept_part(n, before, after)[0]
            if max(before, after) > kept.stop - kept.start:
                raise self.shape_error(f"mode circular: pad ({before}, {after}) of dim {axis} wraps round more "
                                       f"than the {kept.stop - kept.start} element(s) it keeps")

    def forward_numpy(self, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if self.mode == "constant":
            out.fill(self.value)
            kept, place = self.placement(x.shape)
            out[place] = x[kept]
        else:
            index = np.ix_(*(source_positions(self.mode, n, before, after)
                             for n, (before, after) in zip(x.shape, self.amounts(x.shape))))
            np.copyto(out, x[index])
