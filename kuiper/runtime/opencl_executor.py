"""The OpenCL executor (the interface: kuiper/runtime/executor.py): weights uploaded and kernels built once,
buffers from the device's pool, every operator enqueued without waiting, one upload per input and one download
per output. Operators whose layer has no OpenCL forward run on numpy with explicit transfers. With
precision="fp16" the inputs cross as float32 into a staging buffer and a kernel stores them as half on the
device (cl/convert.cl), and the outputs come back the same way. A plan's second forward is recorded, and later
ones replay it where they can (kuiper/opencl/replay.py)."""

from __future__ import annotations

import contextlib
import warnings

from kuiper.core.errors import KuiperWarning
from kuiper.core.variants import Variants
from kuiper.opencl import DeviceTensor, Enqueuer, get_runtime, round_up
from kuiper.opencl.copy_chain import CopyChain
from kuiper.opencl.fused import FusedLayer
from kuiper.opencl.gated import GatedLinear
from kuiper.opencl.heads import SplitHeads
from kuiper.opencl.layer import runs_on_device
from kuiper.opencl.replay import Replay
from kuiper.opencl.runtime import Scratch
from kuiper.opencl.tuning import MEASURE, TuningCache, choose
from kuiper.runtime.backends import backend_class
from kuiper.runtime.planner import reuse_waits


class OpenCLExecutor:
    name = "opencl"
    device = True
    fuses = True
    # what the passes make
    fused_class, chain_class, gated_class, heads_class = FusedLayer, CopyChain, GatedLinear, SplitHeads

    def __init__(self, device: str | None, schedule: str, tuning: str, where: str, precision: str = "fp32",
                 warn: bool = True):
        self.spec = device
        self.warn = warn  # whether host fallbacks are warned of (not where opencl was chosen by default)
        self.precision = precision  # how float32 tensors are stored on the device (opencl/runtime.py)
        self.schedule = schedule
        self.tuning = tuning
        self.where = where  # the model file, for messages
        self.runtime = None
        self.host_fallbacks = []  # operators with no OpenCL forward
        self.enqueuer = None
        self.staging = {}  # graph input or output name -> its float32 buffer where it is stored otherwise

    @property
    def replays(self) -> bool:
        """A plan's forwards from its third replay its second (`forward`), on an in-order queue."""
        return self.schedule != "levels"

    def make_layer(self, op):
        return backend_class(op.type, self.name, op.name)(op)

    def build(self, order: list) -> None:
        self.runtime = rt = get_runtime(self.spec).at_precision(self.precision)
        self.cl_convert = {name: rt.kernel("convert.cl", name) for name in ("to_storage", "from_storage")}
        self.tuning_cache = TuningCache() if self.tuning == MEASURE else None
        self.host_fallbacks = []
        for op in order:
            if op.layer is None:
                continue
            if runs_on_device(op.layer):
                op.layer.build_opencl(self.runtime)
            else:
                self.host_fallbacks.append(op)
        if self.host_fallbacks and self.warn:
            names = ", ".join(f"{op.name} ({op.type})" for op in self.host_fallbacks)
            warnings.warn(f"{self.where}: no OpenCL forward for {names}: these run on numpy, with their inputs "
                          f"downloaded and outputs uploaded", KuiperWarning, stacklevel=5)

    def prepare(self, plan, order: list) -> None:
        plan.place(self.runtime.pool.slots(plan.assignment),
                   lambda slot, shape, dtype: DeviceTensor(self.runtime, slot, shape, self.runtime.stored(dtype)))
        operands = {o.name: o for op in order for o in op.output_operands}
        plan.reuse_waits = reuse_waits(plan.lifetimes, plan.assignment, operands)
        plan.variants = {op.name: choose(op.layer, [plan.shapes[o.name] for o in op.input_operands], self.tuning,
                                         self.tuning_cache)
                         for op in order if op.layer is not None and op.layer.variants is not None}

    def release(self, plan) -> None:
        for slot in plan.slots:
            self.runtime.pool.give(slot)
        plan.slots = []

    @contextlib.contextmanager
    def forward(self, plan):
        self.enqueuer = q = Enqueuer(self.runtime, levels=self.schedule == "levels")
        self.plan = plan
        if plan.replay is not None and not plan.replay.current:
            plan.replay = None  # a layer's variant changed since: record again
        # recorded at its second walk: making a Replay costs several walks (a Kernel object per launch), and a plan
        # used once (a server's packed step of a length it will not meet again soon) never pays for it
        record, changes = not q.levels and plan.replay is None and plan.forwards > 0, Variants.changes
        q.recording = [] if record else None
        yield
        plan.forwards += 1
        if record:
            plan.replay = Replay(self.runtime, q.recording, changes)

    def replay(self, plan, input_operators: list, feeds: dict) -> bool:
        """Upload the inputs and enqueue the plan's recorded forward, if it has one (False: walk the graph); the
        operators that depend on more than their shapes run again as they did."""
        if plan.replay is None:
            return False
        for op in input_operators:
            self.feed(op, feeds[op.name], plan)

        def live(op):
            self.run(op, [plan.tensors[o.name] for o in op.input_operands],
                     [plan.tensors[o.name] for o in op.output_operands], plan)

        def refresh(op):
            self.enqueuer.begin(op, ())
            op.layer.refresh_opencl(self.enqueuer)
        plan.replay.enqueue(self.enqueuer.queue, live, refresh)
        return True

    def feed(self, op, array, plan) -> DeviceTensor:
        tensor = plan.tensors[op.output_operand.name]
        q = self.enqueuer
        recording, q.recording = q.recording, None  # the upload is each forward's own, not the recording's
        q.begin(op, ())
        if tensor.dtype == array.dtype:
            self.enqueuer.write(tensor.buffer, array)  # the one upload of this input
        else:
            staging = self._staging(op.output_operand.name, array.nbytes)
            self.enqueuer.write(staging, array)
            self._convert("to_storage", tensor.buffer, staging, tensor.size)
        q.recording = recording
        return tensor

    def output(self, operand, plan) -> DeviceTensor:
        return plan.tensors[operand.name]

    def run(self, op, inputs: list, outputs: list, plan) -> None:
        q = self.enqueuer
        q.begin(op, [o.producer for o in op.input_operands] + plan.reuse_waits.get(op.name, []))
        refresh = getattr(op.layer, "refresh_opencl", None)  # (a host fallback is not an OpenCLLayer)
        if refresh is not None and op not in self.host_fallbacks:
            recording, q.recording = q.recording, None  # its uploads are each forward's own
            refresh(q)
            q.recording = recording
            if recording is not None:
                recording.append(("refresh", op))
        recorded = len(q.recording) if q.recording is not None else None
        q.live = not getattr(op.layer, "replayable", False)
        if op in self.host_fallbacks:
            q.run_on_host(op.layer, inputs, outputs)
        else:
            op.layer.forward_opencl(q, inputs, outputs)
        if recorded is not None and q.live:  # a replay runs this operator again instead of its launches
            del q.recording[recorded:]
            q.recording.append(("live", op))

    def results(self, operands: list) -> list:
        self.enqueuer.finish()
        downloads = []  # the one download of each output, in the graph's dtype: the rows its producer wrote
        for operand in operands:
            tensor, dtype = self.plan.tensors[operand.name], self.plan.dtypes[operand.name]
            if tensor.dtype != dtype:
                staging = self._staging(operand.name, tensor.size * dtype.itemsize)
                self._convert("from_storage", staging, tensor.buffer, tensor.size)
                tensor = DeviceTensor(self.runtime, staging, tensor.shape, dtype)
            layer = operand.producer.layer if operand.producer is not None else None
            rows = tensor.size // tensor.shape[-1] if tensor.ndim and tensor.shape[-1] else 0
            written = layer.rows_written(rows) if layer is not None else (0, rows)
            downloads.append((tensor, written if written != (0, rows) else None))
        self.enqueuer.finish()
        return [tensor.numpy(rows) for tensor, rows in downloads]

    def _staging(self, name: str, nbytes: int):
        scratch = self.staging.get(name) or self.staging.setdefault(name, Scratch(self.runtime))
        return scratch.fit(nbytes)

    def _convert(self, name: str, dest, src, count: int) -> None:
        if count:
            self.enqueuer.run(self.cl_convert[name], (round_up(count, 256),), None, dest, src, count)

    def device_seconds(self, op):
        return self.enqueuer.kernel_seconds(op.name)
