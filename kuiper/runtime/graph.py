"""RuntimeGraph: turns a PNNX model into linked runtime operators and runs them.

States, as in KuiperInfer:  NEED_INIT --init()--> NEED_BUILD --build()--> COMPLETE --forward()...

  init()    reads the .param/.bin records and links operators, operands and successors.
  build()   creates one layer per operator (checking its parameters), fixes the execution order by a
            dry run of the BFS below (so a graph that can never finish fails here, not in forward), and
            plans memory for the input shapes recorded in the file.
  forward() runs the BFS: pop a ready operator, run its layer, then probe each successor: bump its
            meet_num for every input slot the finished operator fed, hand the output tensor over by
            reference, and enqueue the successor once meet_num equals its number of inputs.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import deque
from enum import IntEnum
from pathlib import Path

import numpy as np

from kuiper import pnnx
from kuiper.custom import CustomOps
from kuiper.errors import BackendError, GraphError, InputError, KuiperWarning, ShapeError, UnsupportedOperatorError
from kuiper.layers.registry import is_supported, layer_class
from kuiper.runtime.operators import (
    RuntimeAttribute, RuntimeOperand, RuntimeOperator, RuntimeParameter, numpy_dtype,
)
from kuiper.opencl import DeviceTensor
from kuiper.cpu import threads
from kuiper.runtime.planner import Lifetime, assign_buffers
from kuiper.opencl.tuning import MEASURE, TuningCache, choose, tuning_mode
from kuiper.tensor import Tensor

INPUT, OUTPUT, TUPLE = "pnnx.Input", "pnnx.Output", "prim::TupleConstruct"
#: operators the graph itself handles: they move tensors around but compute nothing
STRUCTURAL = frozenset({INPUT, OUTPUT, TUPLE})
BACKENDS = ("numpy", "opencl")
SCHEDULES = ("inorder", "levels")


class GraphState(IntEnum):
    NEED_INIT = -2
    NEED_BUILD = -1
    COMPLETE = 0


class ExecutionPlan:
    """Everything forward needs for one set of input shapes: every operand's shape and dtype, and the
    pooled buffers laid out by liveness. On numpy the graph outputs are not pooled (each forward returns
    fresh arrays); on OpenCL inputs and outputs have device buffers too, and cross to the host once.
    `aliases` ({operand: operand it overwrites}) are the outputs of in-place operators: they get no buffer of
    their own but the tensor of the operand they overwrite."""

    def __init__(self, shapes: dict, dtypes: dict, lifetimes: list, runtime=None, aliases=None):
        self.shapes = shapes
        self.dtypes = dtypes
        self.assignment = assign_buffers(lifetimes)
        self.runtime = runtime
        if runtime is None:
            self.slots = [np.empty(size, dtype=np.uint8) for size in self.assignment.slot_sizes]
        else:
            self.slots = runtime.pool.slots(self.assignment)
        self.tensors = {}
        for life in lifetimes:
            name = life.key
            slot = self.slots[self.assignment.slot_of[name]]
            if runtime is None:
                view = slot[:life.size].view(dtypes[name]).reshape(shapes[name])
                self.tensors[name] = Tensor.from_numpy(view)
            else:
                self.tensors[name] = DeviceTensor(runtime, slot, shapes[name], dtypes[name])
        for name, source in (aliases or {}).items():  # in file order, so a chain's source is placed first
            self.tensors[name] = self.tensors[source]

    @property
    def pooled_bytes(self) -> int:
        return self.assignment.total_bytes

    def unpooled_bytes(self) -> int:
        """What the same operands would take with one buffer each (the baseline: no planning, nothing in place)."""
        return sum(t.nbytes for t in self.tensors.values())

    def release(self) -> None:
        """Give device buffers back to the pool (a plan that is dropped)."""
        if self.runtime is not None:
            for slot in self.slots:
                self.runtime.pool.give(slot)
            self.slots = []


class RuntimeGraph:
    """A PNNX model ready to run. See the module docstring for the life cycle."""

    def __init__(self, param_path, bin_path=None, backend: str = "numpy", device: str | None = None,
                 schedule: str = "inorder", custom_ops=None, tuning: str | None = None):
        if backend not in BACKENDS:
            raise BackendError(f"unknown backend {backend!r} (available: {', '.join(BACKENDS)})")
        if schedule not in SCHEDULES:
            raise BackendError(f"unknown schedule {schedule!r} (available: {', '.join(SCHEDULES)})")
        self.param_path = str(param_path)
        self.bin_path = None if bin_path is None else str(bin_path)
        self.backend = backend
        self.device = device
        self.schedule = schedule
        self.tuning = tuning_mode(tuning)  # how layers with kernel variants pick one per shape (variants.py)
        # custom operator configs (kuiper/custom/): consulted before the registry, for this graph only
        self.custom_ops = CustomOps.load(custom_ops)
        self.runtime = None      # the OpenCLRuntime on the opencl backend
        self.host_fallbacks = []  # operators with no OpenCL forward, run on numpy with explicit transfers
        self.state = GraphState.NEED_INIT
        self.operators = []      # RuntimeOperator, file order
        self.operands = {}       # name -> RuntimeOperand
        self.input_operators = []
        self.output_operands = []  # flattened graph outputs, in order
        self.order = []          # execution order fixed by build()
        self.in_place = {}       # numpy: operand -> the operand its in-place producer overwrote (see build)
        self.fused = {}          # numpy: operator -> the operator that does its work (see build)
        self.extra_inputs = {}   # numpy: operator -> operands it reads for operators fused into it (see build)
        self._plans = {}         # input signature -> ExecutionPlan
        self.last_trace = []
        self.last_profile = []
        self.last_variants = {}  # operator name -> the kernel variant it ran in the last forward (OpenCL)

    # ---- init: records -> linked runtime objects --------------------------------------------------
    def init(self) -> "RuntimeGraph":
        records = pnnx.load(self.param_path, self.bin_path)
        self.bin_path = records.bin_path
        self.operands = {
            name: RuntimeOperand(name, rec.shape, rec.dtype) for name, rec in records.operands.items()
        }
        self.operators = []
        for rec in records.operators:
            op = RuntimeOperator(
                rec.type, rec.name, line=rec.line,
                params={k: RuntimeParameter(p.type, p.value) for k, p in rec.params.items()},
                attrs={k: RuntimeAttribute(k, a.dtype, a.shape, a) for k, a in rec.attrs.items()},
            )
            op.input_operands = [self.operands[name] for name in rec.inputs]
            op.input_names = list(rec.input_names)
            op.output_operands = [self.operands[name] for name in rec.outputs]
            for operand in op.input_operands:
                operand.consumers.append(op)
            for operand in op.output_operands:
                operand.producer = op
            self.operators.append(op)
        for op in self.operators:
            successors = []
            for operand in op.output_operands:
                successors += [c for c in operand.consumers if c not in successors]
            op.successors = successors
        self.input_operators = [op for op in self.operators if op.type == INPUT]
        self.output_operands = self._find_outputs()
        self.state = GraphState.NEED_BUILD
        return self

    def _find_outputs(self) -> list:
        outputs = []
        for op in self.operators:
            if op.type != OUTPUT:
                continue
            for operand in op.input_operands:
                producer = operand.producer
                if producer is not None and producer.type == TUPLE:
                    outputs += producer.input_operands
                else:
                    outputs.append(operand)
        return outputs

    def missing_types(self) -> dict:
        """{PNNX type: [operator names]} for every type this model needs that no layer implements."""
        missing = {}
        for op in self.operators:
            if op.type not in STRUCTURAL and op.type not in self.custom_ops and not is_supported(op.type):
                missing.setdefault(op.type, []).append(op.name)
        return missing

    # ---- build: layers, order, first plan -----------------------------------------------------------
    def build(self) -> "RuntimeGraph":
        if self.state == GraphState.NEED_INIT:
            self.init()
        if self.state == GraphState.COMPLETE:
            return self
        missing = self.missing_types()
        if missing:
            listed = "; ".join(f"'{t}' (operator {', '.join(names)})" for t, names in missing.items())
            raise UnsupportedOperatorError(f"{self.param_path}: no layer for {listed}; register one, or serve the "
                                           f"type with a custom OpenCL operator (custom_ops=, KUIPER_CUSTOM_OPS, "
                                           f"--custom-op)")
        for op in self.operators:
            if op.type in STRUCTURAL:
                continue
            if op.type in self.custom_ops:
                op.layer = self.custom_ops.make_layer(op)
            else:
                op.layer = layer_class(op.type, op.name)(op)
        self.order = self._schedule()
        if self.backend == "opencl":
            self._build_opencl()
        else:
            self._fuse_in_place()
        recorded = [op.output_operand.shape for op in self.input_operators]
        if all(s is not None and all(isinstance(d, int) for d in s) for s in recorded):
            dtypes = [numpy_dtype(op.output_operand.dtype) for op in self.input_operators]
            self._check_recorded(self._plan(list(zip(map(tuple, recorded), dtypes))))
        self.state = GraphState.COMPLETE
        return self

    def _fuse_in_place(self) -> None:
        """On numpy, let operators overwrite their input instead of writing a buffer of their own, wherever
        nothing else reads that input, and let the producer of that input do their work while its output is
        still in the cache; the fused operator then only hands the tensor on. Two kinds:

        - element-wise layers that can work in place (Layer.in_place: ReLU, clamps), done by a producer that
          takes them (Layer.fuse: convolution, expressions);
        - a sum of two tensors (pnnx.Expression add(@0,@1): ResNet's residual add), done by the producer of
          one of them (Layer.fuse_add: convolution) when the other is ready before that producer runs: the
          graph then hands the producer the other tensor as an extra input.

        The graph's own inputs (the caller's arrays) and outputs (fresh arrays per forward) are never shared."""
        graph_ends = {o.name for o in self.output_operands}
        graph_ends.update(op.output_operand.name for op in self.input_operators)
        step = {op.name: k for k, op in enumerate(self.order)}
        for op in self.order:
            if op.layer is None or len(op.output_operands) != 1 or op.output_operand.name in graph_ends:
                continue
            sums = len(op.input_operands) == 2 and op.layer.adds_two_inputs
            if not (op.layer.in_place and len(op.input_operands) == 1) and not sums:
                continue
            for source in op.input_operands:
                other = [o for o in op.input_operands if o is not source]
                if len(source.consumers) != 1 or source.name in graph_ends:
                    continue
                if other and (source.shape is None or source.shape != op.output_operand.shape):
                    continue  # the sum must have this input's shape (as recorded), not a broadcast larger one
                if other and step[other[0].producer.name] > step[source.producer.name]:
                    continue  # the other tensor would not be ready when the producer runs
                self.in_place[op.output_operand.name] = source.name
                # an activation goes to whoever does its input's work; a sum only to a producer that runs
                doer = source.producer.name if other else self.fused.get(source.producer.name, source.producer.name)
                layer = self.order[step[doer]].layer
                if doer not in self.fused and layer is not None and (
                        layer.fuse_add() if other else layer.fuse(op.layer)):
                    self.fused[op.name] = doer
                    if other:
                        self.extra_inputs[doer] = other
                break

    def _build_opencl(self) -> None:
        """Upload weights and compile kernels once; say which operators must run on the host."""
        from kuiper.opencl import get_runtime

        self.runtime = get_runtime(self.device)
        self.tuning_cache = TuningCache() if self.tuning == MEASURE else None
        self.host_fallbacks = []
        for op in self.order:
            if op.layer is None:
                continue
            if op.layer.supports_opencl:
                op.layer.build_opencl(self.runtime)
            else:
                self.host_fallbacks.append(op)
        if self.host_fallbacks:
            names = ", ".join(f"{op.name} ({op.type})" for op in self.host_fallbacks)
            warnings.warn(f"{self.param_path}: no OpenCL forward for {names}: these run on numpy, with their "
                          f"inputs downloaded and outputs uploaded", KuiperWarning, stacklevel=3)

    def _schedule(self) -> list:
        """A dry run of forward's BFS that only counts: the order it yields is the execution order.

        Any operator left unvisited can never become ready (a cycle, or an input nobody produces)."""
        meet = {op.name: 0 for op in self.operators}
        queue = deque(op for op in self.operators if not op.input_operands)
        order = []
        while queue:
            op = queue.popleft()
            order.append(op)
            for operand in op.output_operands:
                for succ in operand.consumers:
                    meet[succ.name] += 1
                    if meet[succ.name] == len(succ.input_operands):
                        queue.append(succ)
        if len(order) != len(self.operators):
            stuck = [op for op in self.operators if op not in order]
            details = ", ".join(
                f"'{op.name}' ({op.type}, {meet[op.name]}/{len(op.input_operands)} inputs ready)"
                for op in stuck[:5]
            )
            raise GraphError(
                f"{self.param_path}: {len(stuck)} operator(s) can never run (a cycle or a missing input): {details}"
            )
        return order

    # ---- plans: shapes and memory per input signature ----------------------------------------------
    def _plan(self, signature: list) -> ExecutionPlan:
        """Infer every operand's shape for these (shape, dtype) inputs and lay out buffers by liveness."""
        key = tuple(signature)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        shapes, dtypes = {}, {}
        for op, (shape, dtype) in zip(self.input_operators, signature):
            shapes[op.output_operand.name] = shape
            dtypes[op.output_operand.name] = dtype
        for op in self.order:
            if op.layer is None:
                continue
            in_shapes = [shapes[o.name] for o in op.input_operands]
            out_shapes = op.layer.output_shapes(in_shapes)
            if self.runtime is None:
                op.layer.prepare(in_shapes)
            out_dtypes = op.layer.output_dtypes([dtypes[o.name] for o in op.input_operands])
            for operand, shape, dtype in zip(op.output_operands, out_shapes, out_dtypes):
                shapes[operand.name] = tuple(int(d) for d in shape)
                dtypes[operand.name] = np.dtype(dtype)

        for name, source in self.in_place.items():
            if shapes[name] != shapes[source]:
                raise ShapeError(f"{self.param_path}: '{self.operands[name].producer.name}' writes over its input "
                                 f"'{source}', but at these input shapes its output {_fmt(shapes[name])} differs "
                                 f"from that input's {_fmt(shapes[source])}")
        lifetimes = self._lifetimes(shapes, dtypes)
        plan = ExecutionPlan(shapes, dtypes, lifetimes, self.runtime, self.in_place)
        plan.reuse_waits = self._reuse_waits(lifetimes, plan.assignment)
        plan.variants = self._choose_variants(shapes) if self.runtime is not None else {}
        self._plans[key] = plan
        return plan

    def _choose_variants(self, shapes: dict) -> dict:
        """{operator name: variant name} for each layer with kernel variants (kuiper/opencl/tuning.py), chosen
        for its input shapes by rule or by measurement, as `tuning` says."""
        return {op.name: choose(op.layer, [shapes[o.name] for o in op.input_operands], self.tuning, self.tuning_cache)
                for op in self.order if op.layer is not None and op.layer.variants is not None}

    def _reuse_waits(self, lifetimes: list, assignment) -> dict:
        """{operator name: operators it must wait for because it writes a reused buffer}.

        An in-order queue runs kernels one after another, so reusing a buffer is safe. On an out-of-order
        queue (schedule="levels") a kernel waits only for the events it is given: one that writes into a
        buffer must also wait for everyone still reading the buffer's previous tenant (or, with no
        readers, for the previous tenant's writer)."""
        previous = {}  # slot -> operand name last placed there
        waits = {}
        for life in sorted(lifetimes, key=lambda l: l.first):
            slot = assignment.slot_of[life.key]
            before = previous.get(slot)
            previous[slot] = life.key
            if before is None:
                continue
            tenant = self.operands[before]
            writer = self.operands[life.key].producer
            waits.setdefault(writer.name, []).extend(tenant.consumers or [tenant.producer])
        return waits

    def _lifetimes(self, shapes: dict, dtypes: dict) -> list:
        """Each pooled operand's size and the steps it lives between (its producer, its last reader).

        On numpy the graph inputs are the caller's arrays and the outputs are fresh arrays per forward, so
        neither is pooled; on OpenCL both get device buffers, the outputs alive until the end. An in-place
        operator's output has no buffer of its own: the buffer it overwrites lives on until its last reader."""
        on_device = self.runtime is not None
        graph_outputs = {o.name for o in self.output_operands}
        step = {op.name: i for i, op in enumerate(self.order)}
        last = {}  # operand -> the last step reading its buffer, under any of its names
        for op in reversed(self.order):
            for operand in op.output_operands:
                readers = [step[c.name] for c in operand.consumers] + [last.get(operand.name, step[op.name])]
                source = self.in_place.get(operand.name, operand.name)
                last[source] = max(max(readers), last.get(source, 0))
        lifetimes = []
        for op in self.order:
            if op.layer is None and not (on_device and op.type == INPUT):
                continue
            for operand in op.output_operands:
                if operand.name in self.in_place:
                    continue
                if operand.name in graph_outputs:
                    if not on_device:
                        continue
                    end = len(self.order)
                else:
                    end = last[operand.name]
                nbytes = int(np.prod(shapes[operand.name], dtype=np.int64)) * dtypes[operand.name].itemsize
                lifetimes.append(Lifetime(operand.name, nbytes, step[op.name], end))
        return lifetimes

    def _check_recorded(self, plan: ExecutionPlan) -> None:
        """At the recorded input shapes, every inferred shape must equal the `#` shape in the file."""
        for name, shape in plan.shapes.items():
            recorded = self.operands[name].shape
            if recorded is None or not all(isinstance(d, int) for d in recorded):
                continue
            if tuple(recorded) != shape:
                producer = self.operands[name].producer
                raise ShapeError(
                    f"{self.param_path}:{producer.line}: {producer.type} operator '{producer.name}' infers shape "
                    f"{shape} for operand {name}, the file records {tuple(recorded)}"
                )

    def _signature(self, inputs: tuple) -> list:
        """Check the arrays given to forward against the graph inputs; return their (shape, dtype) list."""
        if len(inputs) != len(self.input_operators):
            raise InputError(
                f"{self.param_path}: the graph takes {len(self.input_operators)} input(s), "
                f"forward was given {len(inputs)}"
            )
        arrays, signature = [], []
        for op, x in zip(self.input_operators, inputs):
            if isinstance(x, Tensor):
                x = x.data
            expected = op.output_operand.shape
            where = f"graph input '{op.name}' (operand {op.output_operand.name})"
            if not isinstance(x, np.ndarray):
                raise InputError(f"{where}: expected a numpy array, got {type(x).__name__}")
            if x.dtype != np.float32:
                if x.dtype not in (np.float64, np.float16):
                    raise InputError(f"{where}: expected float32 data, got {x.dtype}")
                warnings.warn(f"{where}: {x.dtype} input converted to float32", KuiperWarning, stacklevel=3)
                x = x.astype(np.float32)
            if not x.flags.c_contiguous:
                raise InputError(f"{where}: the array is not C-contiguous (use np.ascontiguousarray)")
            if expected is not None and len(expected) != x.ndim:
                raise InputError(f"{where}: expected shape {_fmt(expected)}, given {_fmt(x.shape)} (wrong rank)")
            arrays.append(x)
            signature.append((tuple(x.shape), x.dtype))
        try:
            plan = self._plan(signature)
        except ShapeError as e:
            described = "; ".join(
                f"'{op.name}' expected {_fmt(op.output_operand.shape)}, given {_fmt(shape)}"
                for op, (shape, _) in zip(self.input_operators, signature)
            )
            raise InputError(f"graph input shapes do not fit ({described}): {e}") from None
        return arrays, plan

    # ---- forward ------------------------------------------------------------------------------------
    def forward(self, *inputs, trace: bool = False, profile: bool = False) -> list:
        """Run the graph on numpy arrays (one per pnnx.Input, in file order); return the outputs as arrays.

        With profile=True, `last_profile` holds (operator, host seconds, device seconds or None) per layer."""
        if self.state != GraphState.COMPLETE:
            raise GraphError(f"{self.param_path}: forward() needs a built graph: call build() first "
                             f"(state is {self.state.name})")
        arrays, plan = self._signature(inputs)
        self.last_variants = plan.variants
        self.last_trace = []
        host_times = []
        for op in self.operators:
            op.meet_num = 0
        enqueuer = None
        if self.runtime is not None:
            from kuiper.opencl import Enqueuer

            enqueuer = Enqueuer(self.runtime, levels=self.schedule == "levels")

        queue = deque(op for op in self.order if not op.input_operands)
        feed = {op.name: x for op, x in zip(self.input_operators, arrays)}
        # numpy layers split their work over kuiper's threads, awake for the forward; BLAS keeps to one meanwhile
        with contextlib.nullcontext() if enqueuer is not None else threads.active():
            while queue:
                op = queue.popleft()
                started = time.perf_counter() if profile else 0.0
                self._run(op, plan, feed, enqueuer)
                if profile and op.layer is not None:
                    host_times.append((op, time.perf_counter() - started))
                if trace:
                    fused = f" (fused into {self.fused[op.name]})" if op.name in self.fused else ""
                    self._trace(f"run   {op.name:<28} {op.type}{fused}")
                for operand in op.output_operands:
                    for succ in operand.consumers:  # one entry per input slot fed by this operand
                        succ.meet_num += 1
                        if trace:
                            waits = len(succ.input_operands)
                            self._trace(f"        probe {succ.name:<22} meet_num {succ.meet_num}/{waits}")
                        if succ.meet_num == len(succ.input_operands):
                            queue.append(succ)

        if enqueuer is None:
            outputs = [operand.tensor.data for operand in self.output_operands]
        else:
            enqueuer.finish()
            outputs = [operand.tensor.numpy() for operand in self.output_operands]  # the one download
        if profile:
            self.last_profile = [
                (op, seconds, None if enqueuer is None else enqueuer.kernel_seconds(op.name))
                for op, seconds in host_times
            ]
        return outputs

    def _run(self, op: RuntimeOperator, plan: ExecutionPlan, feed: dict, enqueuer) -> None:
        if op.type == INPUT:
            if enqueuer is None:
                op.output_operand.tensor = Tensor.from_numpy(feed[op.name])
            else:  # the one upload of this input
                tensor = plan.tensors[op.output_operand.name]
                enqueuer.begin(op, ())
                enqueuer.write(tensor.buffer, feed[op.name])
                op.output_operand.tensor = tensor
            return
        if op.type == TUPLE:
            # a tuple is only a bundle of references to its parts; pnnx.Output unpacks it
            op.output_operand.tensor = tuple(o.tensor for o in op.input_operands)
            return
        if op.layer is None:  # pnnx.Output: the outputs already sit in their operands
            return
        outputs = []
        for operand in op.output_operands:
            tensor = plan.tensors.get(operand.name)
            if tensor is None:  # a graph output on numpy: a fresh array the caller will own
                tensor = Tensor.empty(plan.shapes[operand.name], dtype=plan.dtypes[operand.name])
            outputs.append(tensor)
        inputs = [o.tensor for o in op.input_operands + self.extra_inputs.get(op.name, [])]
        if op.name in self.fused:
            pass  # its input's producer has already done its work, in the very tensor it hands on
        elif enqueuer is None:
            op.layer.forward_numpy([t.data for t in inputs], [t.data for t in outputs])
        else:
            enqueuer.begin(op, [o.producer for o in op.input_operands] + plan.reuse_waits.get(op.name, []))
            if op in self.host_fallbacks:
                enqueuer.run_on_host(op.layer, inputs, outputs)
            else:
                op.layer.forward_opencl(enqueuer, inputs, outputs)
        for operand, tensor in zip(op.output_operands, outputs):
            operand.tensor = tensor  # handed over by reference: successors read this very object

    def _trace(self, line: str) -> None:
        self.last_trace.append(line)
        print(line)

    # ---- information --------------------------------------------------------------------------------
    @property
    def plans(self) -> dict:
        """The execution plans made so far, keyed by input signature ((shape, dtype) per input)."""
        return dict(self._plans)

    def plan_for(self, *shapes) -> ExecutionPlan:
        """The execution plan (shapes, buffers) for float32 inputs of these shapes."""
        if self.state != GraphState.COMPLETE:
            raise GraphError(f"{self.param_path}: build() the graph first")
        return self._plan([(tuple(s), np.dtype(np.float32)) for s in shapes])

    def __repr__(self):
        return f"RuntimeGraph({Path(self.param_path).name}, {len(self.operators)} operators, {self.state.name})"


def _fmt(shape) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


def load(param_path, bin_path=None, backend: str = "numpy", **options) -> RuntimeGraph:
    """Read, link and build a model in one call (options: device, schedule, tuning for the opencl backend;
    custom_ops, config files or directories of custom operators)."""
    return RuntimeGraph(param_path, bin_path, backend=backend, **options).build()
