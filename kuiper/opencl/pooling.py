"""Max and average pooling on OpenCL (the ops and their window rules: kuiper/layers/pooling.py), in
cl/pooling.cl. Where numpy visits the kernel's taps over whole arrays, a work-item here computes outputs from
their windows, with the same rules: padding never read, counted only in average pooling's divisor.

- max_pool2d, avg_pool2d: on GPUs a work-item per output, so that neighbouring work-items write neighbouring
  addresses; on CPUs a work-item per output row, which spares the division per output PoCL runs slowly.
- pool2d_rows (both on CPUs): the window compiled in (-DKH, -DKW, strides, dilations; -DAVG and the divisor's
  rule for average pooling), a work-item computes the outputs of a row ROW_LANES at a time in the lanes of a
  vector, holding the input columns they read in registers. Windows too wide for that (more than MAX_ROW_SPAN
  columns) take max_pool2d or avg_pool2d.
- max_pool2d_window (max pooling on GPUs): the window compiled in as for pool2d_rows, a work-item per output,
  its taps unrolled."""

from __future__ import annotations

from kuiper.layers import pooling
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up

#: outputs of a row pool2d_rows computes together (LANES in cl/pooling.cl)
ROW_LANES = 8
#: the widest run of input columns (ROW_LANES - 1 strides plus one window) pool2d_rows holds in registers;
#: wider windows take max_pool2d or avg_pool2d
MAX_ROW_SPAN = 64
#: work-items a group of max_pool2d_window: 64 left an NVIDIA GPU's ResNet-18 pool half again as slow
#: (docs/tuning.md)
WINDOW_GROUP = 128


class OpenCLPool2d(OpenCLLayer):
    """What max and average pooling share on OpenCL: one launch of their kernel over the output."""

    #: the window kernel in cl/pooling.cl
    cl_name: str
    #: the kernel built for the window that GPUs take, where this kind of pooling has one
    cl_window_name = None

    def cl_args(self) -> tuple:
        """The window kernel's arguments after the geometry, which only one kind of pooling reads."""
        raise NotImplementedError

    def rows_options(self) -> list:
        """The options that make pool2d_rows this kind of pooling, besides the window's."""
        raise NotImplementedError

    def build_opencl(self, rt):
        # CPUs: pool2d_rows, built for this window, where the columns a row's ROW_LANES outputs read fit in
        # registers; else the window kernel, a work-item per output row on CPUs, per output on GPUs
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        window = [f"-DKH={kh}", f"-DKW={kw}", f"-DSH={sh}", f"-DSW={sw}", f"-DDH={dh}", f"-DDW={dw}",
                  *self.rows_options()]
        self.cl_rows = self.cl_window = None
        if rt.is_cpu and (ROW_LANES - 1) * sw + (kw - 1) * dw + 1 <= MAX_ROW_SPAN:
            self.cl_rows = rt.kernel("pooling.cl", "pool2d_rows", window)
            return
        self.cl_kernel = rt.kernel("pooling.cl", self.cl_name)
        self.cl_whole_rows = rt.is_cpu
        if not rt.is_cpu and self.cl_window_name is not None:
            self.cl_window = rt.kernel("pooling.cl", self.cl_window_name, window)

    def forward_opencl(self, q, inputs, outputs):
        x, y = inputs[0], outputs[0]
        if self.cl_rows is not None:
            q.run(self.cl_rows, (y.shape[-2], y.size // (y.shape[-2] * y.shape[-1])), None, y.buffer, x.buffer,
                  *x.shape[-2:], *y.shape[-2:], *self.padding)
            return
        if self.cl_window is not None and 0 < y.size < 2 ** 31:  # (the kernel's index is an int)
            q.run(self.cl_window, (round_up(y.size, WINDOW_GROUP),), (WINDOW_GROUP,), y.buffer, x.buffer, y.size,
                  *x.shape[-2:], *y.shape[-2:], *self.padding)
            return
        (out_h, out_w), span = y.shape[-2:], y.shape[-1] if self.cl_whole_rows else 1
        geometry = (*x.shape[-2:], out_h, out_w, *self.kernel, *self.stride, *self.padding)
        q.run(self.cl_kernel, (round_up(out_h * -(-out_w // span), 16), y.size // (out_h * out_w)), None, y.buffer,
              x.buffer, span, *geometry, *self.cl_args())


@opencl("nn.MaxPool2d", "F.max_pool2d")
class MaxPool2d(OpenCLPool2d, pooling.MaxPool2d):
    cl_name = "max_pool2d"
    cl_window_name = "max_pool2d_window"

    def cl_args(self):
        return self.dilation

    def rows_options(self):
        return []


@opencl("nn.AvgPool2d", "F.avg_pool2d")
class AvgPool2d(OpenCLPool2d, pooling.AvgPool2d):
    cl_name = "avg_pool2d"

    def cl_args(self):
        # the kernel reads a divisor_override of 0 (never a valid one) as "none"
        return int(self.count_include_pad), int(self.divisor_override or 0)

    def rows_options(self):
        return ["-DAVG", f"-DCOUNT_PAD={int(self.count_include_pad)}", f"-DDIVISOR={int(self.divisor_override or 0)}"]
