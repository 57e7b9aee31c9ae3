"""F.pad on OpenCL (the op and its modes: kuiper/layers/pad.py), in cl/pad.cl.

- constant: `fill` writes the value over the whole output (skipped where no dim grows: then every output
  element is input), then one strided copy (cl/copy.cl) puts the part of the input that stays into its place.
- reflect, replicate, circular: `pad`, built with the mode's MODE, computes per output element the input
  position it reads, as the reference's source_positions does per dim. It sees the last three dims (size-1
  ones in front of fewer) and everything before them as one.

Both kernels move bits, not numbers: they take an unsigned integer as wide as the element (WORD_TYPES), so one
program serves every dtype of that size; the float32 one is built with the layer, others when first met."""

from __future__ import annotations

import numpy as np

from kuiper.layers import pad
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up
from kuiper.opencl.strided import WORD_TYPES, StridedCopy, sliced

#: the MODE each mode builds cl/pad.cl with (constant padding uses only its `fill`, which ignores MODE)
KERNEL_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}


@opencl("F.pad", *pad.MODULE_MODES)
class Pad(OpenCLLayer, pad.Pad):
    def build_opencl(self, rt):
        self.rt, self.kernels = rt, {}
        if self.mode == "constant":
            self.copier = StridedCopy(rt)
        self.kernel(rt.stored(np.float32).itemsize)  # float32's, at the runtime's precision: what graphs carry

    def kernel(self, itemsize: int):
        """cl/pad.cl for elements of `itemsize` bytes: `fill` for constant padding, `pad` for the other modes."""
        kernel = self.kernels.get(itemsize)
        if kernel is None:
            options = [f"-DT={WORD_TYPES[itemsize]}", f"-DMODE={KERNEL_MODES.get(self.mode, 0)}"]
            kernel = self.rt.kernel("pad.cl", "fill" if self.mode == "constant" else "pad", options)
            self.kernels[itemsize] = kernel
        return kernel

    def forward_opencl(self, q, inputs, outputs):
        x, out = inputs[0], outputs[0]
        if not out.size:
            return
        kernel = self.kernel(x.dtype.itemsize)
        pairs = self.amounts(x.shape)
        if self.mode == "constant":
            if any(before > 0 or after > 0 for before, after in pairs):  # some of the output is not input
                with np.errstate(over="ignore"):  # past half's range the value is stored as ±inf, as any result is
                    bits = np.array(self.value, dtype=x.dtype).view(f"u{x.dtype.itemsize}").item()
                q.run(kernel, (round_up(out.size, 256),), None, out.buffer, bits, out.size)
            kept, place = self.placement(x.shape)
            self.copier(q, tuple(part.stop - part.start for part in kept), sliced(out, place), sliced(x, kept))
            return
        # the kernel sees the last three dims (size-1 ones in front of fewer) and everything before as one
        last3 = [((1,) * 3 + shape)[-3:] for shape in (out.shape, x.shape)]
        befores = [before for before, _ in ([(0, 0)] * 3 + pairs)[-3:]]
        q.run(kernel, (round_up(out.size, 256),), None, out.buffer, x.buffer, out.size, *last3[0], *last3[1],
              *befores)
