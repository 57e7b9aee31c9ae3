"""What every OpenCL layer adds to its reference layer: build once, enqueue per forward.

An OpenCL layer subclasses the reference layer of kuiper/layers/ (its checks and shapes stay the same) and
this mixin, as the fast CPU layers of kuiper/cpu/ subclass it for the numpy backend. The graph calls
`build_opencl` once when an OpenCL graph is built and `forward_opencl` for every forward; both see the
runtime's handles only (kuiper/opencl/runtime.py), never host arrays.
"""

from __future__ import annotations

import numpy as np

from kuiper.opencl.enqueuer import Enqueuer
from kuiper.opencl.runtime import DeviceTensor


class OpenCLLayer:
    """Mixin for a layer with an OpenCL forward; put it before the reference class in the bases."""

    #: whether the launches of forward_opencl follow from the input shapes alone, so that a recorded forward may
    #: enqueue them again (kuiper/opencl/replay.py); False for a layer whose launches follow state it keeps
    replayable = True
    #: a layer whose launches read host data, in buffers of its own, that changes between forwards of the same
    #: shapes defines refresh_opencl(q), which writes it (q.write) before each forward, recorded or replayed
    refresh_opencl = None

    @property
    def supports_opencl(self) -> bool:
        """False where this instance cannot run on the device after all (a fused operator whose steps cannot)."""
        return True

    def build_opencl(self, rt) -> None:
        """Once, when an OpenCL graph is built: fetch kernels (rt.kernel) and upload weights (rt.upload)."""

    def forward_opencl(self, q, inputs: list, outputs: list) -> None:
        """Enqueue kernels (q.run) computing the output DeviceTensors from the input DeviceTensors."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward_opencl")

    def run_opencl(self, rt, *inputs: np.ndarray, variant: str | None = None) -> list:
        """Run this layer alone on an OpenCL device: upload the inputs, run forward_opencl, download.

        The OpenCL twin of run_numpy, for tests and lessons (the graph uploads weights once per build and
        keeps activations on the device; here everything crosses the host boundary each call). `variant`
        names one of the layer's variants to run instead of the one its rule picks."""
        inputs = [np.ascontiguousarray(x) for x in inputs]
        shapes = self.output_shapes([tuple(x.shape) for x in inputs])
        dtypes = self.output_dtypes([x.dtype for x in inputs])
        self.build_opencl(rt)
        if variant is not None:
            self.variants.use([x.shape for x in inputs], variant)
        device_in = [DeviceTensor(rt, rt.upload(x), x.shape, rt.stored(x.dtype)) for x in inputs]
        device_out = [DeviceTensor(rt, rt.allocate(np.prod(s, dtype=np.int64) * rt.stored(d).itemsize), s, rt.stored(d))
                      for s, d in zip(shapes, dtypes)]
        q = Enqueuer(rt)
        q.begin(self.op, ())
        if self.refresh_opencl is not None:
            self.refresh_opencl(q)
        self.forward_opencl(q, device_in, device_out)
        q.finish()
        return [t.numpy().astype(d, copy=False) for t, d in zip(device_out, dtypes)]  # float32 again if stored as fp16


class FeaturesLayer(OpenCLLayer):
    """The OpenCL side of a layer over features (kuiper/layers/linear.py's Features: Linear, Int8Linear), which
    may compute some rows of its input alone: the last (`last_row_only`), or `gather_rows`."""

    cl_gather = None  # cl/embedding.cl's row gather, made at the first forward that gathers

    @property
    def replayable(self) -> bool:
        """Not while computing some rows alone: a forward recorded so would skip the rows a later one asks for,
        so the recording keeps the layer live (a forward recorded with every row serves both)."""
        return not self.last_row_only and self.gather_rows is None

    def input_rows(self, q, x: DeviceTensor) -> tuple:
        """(buffer, first, count): the input rows this forward computes, `count` rows from row `first` of `buffer`,
        into the output's rows from `first`: every row; the last alone; or the rows gather_rows names, copied in
        their order into a scratch buffer (cl/embedding.cl's gather), into the output's first rows."""
        rows = x.size // self.in_features
        if self.gather_rows is None:
            first = rows - 1 if self.last_row_only else 0
            return x.buffer, first, rows - first
        from kuiper.opencl.indices import IndexKernels

        rt, ids = q.runtime, np.asarray(self.gather_rows, np.int32)
        if self.cl_gather is None:
            self.cl_gather = IndexKernels(rt, "embedding.cl", "embedding_rows")
        indices = q.scratch("gathered ids", ids.nbytes)
        q.write(indices, ids)
        gathered = q.scratch("gathered rows", len(ids) * self.in_features * rt.stored(np.float32).itemsize)
        q.run(self.cl_gather[ids.dtype], (-(-self.in_features // 16) * 16, len(ids)), None, gathered, indices,
              x.buffer, len(ids), self.in_features, rows)
        return gathered, 0, len(ids)


def runs_on_device(layer) -> bool:
    """Whether the OpenCL executor enqueues this layer's kernels (else it runs on the host, between transfers)."""
    return isinstance(layer, OpenCLLayer) and layer.supports_opencl
