"""RuntimeGraph: turns a PNNX model into linked runtime operators and runs them.

States, as in KuiperInfer:  NEED_INIT --init()--> NEED_BUILD --build()--> COMPLETE --forward()...

  init()    reads the .param/.bin records and links operators, operands and successors.
  build()   creates one layer per operator (checking its parameters), fixes the execution order by a
            dry run of the BFS below (so a graph that can never finish fails here, not in forward), lets
            the fusion pass rewrite the operator list (runtime/fusion.py), and plans memory for the input
            shapes recorded in the file.
  forward() runs the BFS: pop a ready operator, run its layer, then for each successor bump its meet_num
            by the input slots the finished operator fed, the output tensor handed over by reference, and
            enqueue the successor once meet_num equals its number of inputs.

What differs between backends (numpy, reference, opencl) sits behind an executor (runtime/executor.py);
memory planning is runtime/planner.py.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from enum import IntEnum
from pathlib import Path

import numpy as np

from kuiper import pnnx
from kuiper.custom import CustomOps
from kuiper.errors import BackendError, GraphError, InputError, KuiperWarning, ShapeError, UnsupportedOperatorError
from kuiper.layers.registry import is_supported
from kuiper.opencl.tuning import tuning_mode
from kuiper.runtime import fusion
from kuiper.runtime.executor import NumpyExecutor, ReferenceExecutor
from kuiper.runtime.operators import RuntimeAttribute, RuntimeOperand, RuntimeOperator, RuntimeParameter, numpy_dtype
from kuiper.runtime.opencl_executor import OpenCLExecutor
from kuiper.runtime.planner import ExecutionPlan, lifetimes
from kuiper.tensor import Tensor

INPUT, OUTPUT, TUPLE = "pnnx.Input", "pnnx.Output", "prim::TupleConstruct"
#: operators the graph itself handles: they move tensors around but compute nothing
STRUCTURAL = frozenset({INPUT, OUTPUT, TUPLE})
BACKENDS = ("numpy", "reference", "opencl")
SCHEDULES = ("inorder", "levels")


class GraphState(IntEnum):
    NEED_INIT = -2
    NEED_BUILD = -1
    COMPLETE = 0


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
        self.tuning = tuning_mode(tuning)  # how layers with kernel variants pick one per shape (opencl/tuning.py)
        if backend == "opencl":
            self.executor = OpenCLExecutor(device, schedule, self.tuning, self.param_path)
        else:
            self.executor = NumpyExecutor() if backend == "numpy" else ReferenceExecutor()
        # custom operator configs (kuiper/custom/): consulted before the registry, for this graph only
        self.custom_ops = CustomOps.load(custom_ops)
        self.state = GraphState.NEED_INIT
        self.operators = []      # RuntimeOperator: file order after init, execution order after build
        self.operands = {}       # name -> RuntimeOperand
        self.input_operators = []
        self.output_operands = []  # flattened graph outputs, in order
        self.order = []          # execution order fixed by build(), after the fusion pass
        self.unfused_order = []  # the same before the fusion pass: the operators as the file has them
        self._plans = {}         # input signature -> ExecutionPlan
        self.last_trace = []
        self.last_profile = []
        self.last_variants = {}  # operator name -> the kernel variant it ran in the last forward

    @property
    def runtime(self):
        """The OpenCLRuntime on the opencl backend, else None."""
        return getattr(self.executor, "runtime", None)

    @property
    def host_fallbacks(self) -> list:
        """On OpenCL, the operators with no OpenCL forward, which run on numpy with explicit transfers."""
        return getattr(self.executor, "host_fallbacks", [])

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

    # ---- build: layers, order, fusion, first plan ---------------------------------------------------
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
            if op.type in self.custom_ops:
                op.layer = self.custom_ops.make_layer(op)
            elif op.type not in STRUCTURAL:
                op.layer = self.executor.make_layer(op)
        self.unfused_order = self._schedule()
        if self.executor.fuses:
            ends = {o.name for o in self.output_operands} | {op.output_operand.name for op in self.input_operators}
            self.operators = fusion.fuse(self.unfused_order, ends)
            self.operands = {o.name: o for op in self.operators for o in op.output_operands}
        self.order = self._schedule()
        self.executor.build(self.order)
        recorded = [op.output_operand.shape for op in self.input_operators]
        if all(s is not None and all(isinstance(d, int) for d in s) for s in recorded):
            dtypes = [numpy_dtype(op.output_operand.dtype) for op in self.input_operators]
            self._check_recorded(self._plan(list(zip(map(tuple, recorded), dtypes))))
        self.state = GraphState.COMPLETE
        return self

    def _schedule(self) -> list:
        """A dry run of forward's BFS: the order it yields is the execution order. Any operator left unvisited
        can never become ready (a cycle, or an input nobody produces)."""
        order = self._bfs(lambda op: None)
        if len(order) != len(self.operators):
            stuck = [op for op in self.operators if op not in order]
            details = ", ".join(f"'{op.name}' ({op.type}, {op.meet_num}/{len(op.input_operands)} inputs ready)"
                                for op in stuck[:5])
            raise GraphError(
                f"{self.param_path}: {len(stuck)} operator(s) can never run (a cycle or a missing input): {details}"
            )
        return order

    # ---- the BFS: the heart of forward ----------------------------------------------------------------
    def _bfs(self, run, trace: bool = False) -> list:
        """Start from the operators that need no input; pop one, `run` it, and let each successor count the
        input slots it fed (meet_num): a successor whose count reaches its number of inputs is ready.
        Returns the operators in the order they ran."""
        for op in self.operators:
            op.meet_num = 0
        queue = deque(op for op in self.operators if not op.input_operands)
        order = []
        while queue:
            op = queue.popleft()
            run(op)
            order.append(op)
            if trace:
                self._trace(f"run   {op.name:<28} {op.type}")
            for succ in op.successors:
                succ.meet_num += succ.slots_fed_by(op)
                if trace:
                    self._trace(f"        probe {succ.name:<22} meet_num {succ.meet_num}/{len(succ.input_operands)}")
                if succ.meet_num == len(succ.input_operands):
                    queue.append(succ)
        return order

    # ---- plans: shapes and memory per input signature ----------------------------------------------
    def _plan(self, signature: list) -> ExecutionPlan:
        """Infer every operand's shape for these (shape, dtype) inputs, lay out buffers by liveness and let
        the backend place them and choose kernel variants."""
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
            out_shapes = op.layer.output_shapes([shapes[o.name] for o in op.input_operands])
            out_dtypes = op.layer.output_dtypes([dtypes[o.name] for o in op.input_operands])
            for operand, shape, dtype in zip(op.output_operands, out_shapes, out_dtypes):
                shapes[operand.name] = tuple(int(d) for d in shape)
                dtypes[operand.name] = np.dtype(dtype)
        aliases = {}
        for op in self.order:
            for operand in op.output_operands:
                source = operand.overwrites
                if source is None:
                    continue
                if shapes[operand.name] != shapes[source.name]:
                    raise ShapeError(f"{self.param_path}: '{op.name}' writes over its input '{source.name}', but at "
                                     f"these input shapes its output {_fmt(shapes[operand.name])} differs from that "
                                     f"input's {_fmt(shapes[source.name])}")
                aliases[operand.name] = source.name
        graph_outputs = {o.name for o in self.output_operands}
        plan = ExecutionPlan(shapes, dtypes, lifetimes(self.order, shapes, dtypes, graph_outputs, self.executor.device),
                             aliases)
        self.executor.prepare(plan, self.order)
        self._plans[key] = plan
        return plan

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
        feeds = {op.name: x for op, x in zip(self.input_operators, arrays)}
        host_times = []

        def run(op):
            started = time.perf_counter()
            self._run(op, plan, feeds)
            if profile and op.layer is not None:
                host_times.append((op, time.perf_counter() - started))

        with self.executor.forward(plan):
            self._bfs(run, trace)
        outputs = self.executor.results(self.output_operands)
        if profile:
            self.last_profile = [(op, seconds, self.executor.device_seconds(op)) for op, seconds in host_times]
        return outputs

    def _run(self, op: RuntimeOperator, plan: ExecutionPlan, feeds: dict) -> None:
        if op.type == INPUT:
            op.output_operand.tensor = self.executor.feed(op, feeds[op.name], plan)
        elif op.type == TUPLE:
            # a tuple is only a bundle of references to its parts; pnnx.Output unpacks it
            op.output_operand.tensor = tuple(o.tensor for o in op.input_operands)
        elif op.layer is not None:  # (pnnx.Output has none: the outputs already sit in their operands)
            outputs = [self.executor.output(operand, plan) for operand in op.output_operands]
            self.executor.run(op, [o.tensor for o in op.input_operands], outputs, plan)
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
