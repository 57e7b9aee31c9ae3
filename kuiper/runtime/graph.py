"""RuntimeGraph: turns a PNNX model into linked runtime operators and runs them.

States, as in KuiperInfer:  NEED_INIT --init()--> NEED_BUILD --build()--> COMPLETE --forward()...

  init()    reads the .param/.bin records, links operators, operands and successors, and checks what forward
            relies on (graph inputs and outputs, tuples).
  build()   takes off an operator's inputs its own weight where pnnx wrote it as one too (runtime/tied.py),
            creates one layer per operator (checking its parameters), fixes the execution order by a
            dry run of the BFS below (so a graph that can never finish fails here, not in forward), lets
            the passes rewrite the operator list (runtime/cats.py, gated.py, siblings.py, heads.py, copies.py,
            fusion.py), and plans memory for the input shapes.
  forward() runs the BFS: pop a ready operator, run its layer, then for each successor bump its meet_num
            by the input slots the finished operator fed, the output tensor handed over by reference, and
            enqueue the successor once meet_num equals its number of inputs.

A plan (shapes and buffers for one set of input shapes) is checked before anything is allocated: its shapes
against the `#` shapes the file records, its bytes against the memory limit (runtime/memory.py). The graph
keeps the last `max_plans` plans it used (MAX_PLANS by default), dropping the least recently used first;
`clear_plans()` drops them all.

What differs between backends (numpy, reference, opencl) sits behind an executor (runtime/executor.py);
memory planning is runtime/planner.py.
"""

from __future__ import annotations

import time
import types
from collections import OrderedDict, deque
from enum import IntEnum
from pathlib import Path

import numpy as np

from kuiper import pnnx
from kuiper.custom import CustomOps
from kuiper.core.errors import BackendError, ConfigError, GraphError, ShapeError, UnsupportedOperatorError
from kuiper.layers.registry import is_supported
from kuiper.opencl.runtime import PRECISIONS
from kuiper.opencl.tuning import tuning_mode
from kuiper.runtime import auto, cats, checks, copies, fusion, gated, heads, memory, siblings, tied
from kuiper.runtime.executor import NumpyExecutor, ReferenceExecutor
from kuiper.core.operators import (  # noqa: F401  (INPUT, OUTPUT, TUPLE, STRUCTURAL: as lessons import them)
    INPUT, OUTPUT, STRUCTURAL, TUPLE, RuntimeAttribute, RuntimeOperand, RuntimeOperator, RuntimeParameter,
    link_successors,
)
from kuiper.runtime.opencl_executor import OpenCLExecutor
from kuiper.runtime.planner import ExecutionPlan, layout

SCHEDULES = ("inorder", "levels")
#: how many execution plans a graph keeps by default: enough for the few batch sizes and image sizes a service
#: meets in turn, while one fed ever new sizes holds at most this many plans' buffers
MAX_PLANS = 8


class GraphState(IntEnum):
    NEED_INIT = -2
    NEED_BUILD = -1
    COMPLETE = 0


class RuntimeGraph:
    """A PNNX model ready to run. See the module docstring for the life cycle."""

    def __init__(self, param_path, bin_path=None, backend: str = "auto", device: str | None = None,
                 schedule: str = "inorder", custom_ops=None, tuning: str | None = None, memory_limit=None,
                 max_plans: int = MAX_PLANS, precision: str = "fp32", text: str | None = None, weights=None):
        backend, device, self.choice = auto.settle(backend, device)  # what "auto" became, why (None: named)
        if schedule not in SCHEDULES:
            raise BackendError(f"unknown schedule {schedule!r} (available: {', '.join(SCHEDULES)})")
        if precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {precision!r} (available: {', '.join(PRECISIONS)})")
        if precision != "fp32" and backend != "opencl":
            raise ConfigError(f"precision {precision} needs the opencl backend: the {backend} backend computes in "
                              f"the file's float32")
        if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
            raise ConfigError(f"max_plans={max_plans!r}: the graph must keep at least one plan")
        self.max_plans = max_plans
        # bytes, or None for runtime/memory.py's default, worked out when a plan is made (what is free changes)
        self._memory_limit = memory.configured(memory_limit)
        self.param_path = str(param_path)
        self.bin_path = None if bin_path is None else str(bin_path)
        # a graph written by a program: the .param's text (param_path names it) and a store of its weights in
        # place of a .bin (kuiper/pnnx/reader.py load; kuiper/llm/ writes a decoder so)
        self.text, self.weights = text, weights
        self.backend, self.device, self.schedule, self.precision = backend, device, schedule, precision
        self.tuning = tuning_mode(tuning)  # how layers with kernel variants pick one per shape (opencl/tuning.py)
        if backend == "opencl":
            self.executor = OpenCLExecutor(device, schedule, self.tuning, self.param_path, precision,
                                           warn=self.choice is None)
        else:
            self.executor = NumpyExecutor() if backend == "numpy" else ReferenceExecutor()
        # custom operator configs (kuiper/custom/): consulted before the registry, for this graph only
        self.custom_ops = CustomOps.load(custom_ops)
        self.state = GraphState.NEED_INIT
        self.operators = []      # RuntimeOperator: file order after init, execution order after build
        self.operands = {}       # name -> RuntimeOperand
        self.input_operators = []
        self.output_operands = []  # flattened graph outputs, in order
        self.order = []          # execution order fixed by build(), after the copies and fusion passes
        self.unfused_order = []  # the same before the passes: the operators as the file has them
        self._plans = OrderedDict()  # input signature -> ExecutionPlan, the least recently used first
        self.last_trace = []
        self.last_profile = []
        self.last_variants = {}  # operator name -> the kernel variant it ran in the last forward
        self.untied = []  # see runtime/tied.py

    @property
    def runtime(self):
        """The OpenCLRuntime on the opencl backend, else None."""
        return self.executor.runtime

    @property
    def host_fallbacks(self) -> list:
        """On OpenCL, the operators with no OpenCL forward, which run on numpy with explicit transfers."""
        return self.executor.host_fallbacks

    # ---- init: records -> linked runtime objects --------------------------------------------------
    def init(self) -> "RuntimeGraph":
        records = pnnx.load(self.param_path, self.bin_path, self.weights, self.text)
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
        link_successors(self.operators)
        checks.structure(self.operators, self.param_path)
        self.input_operators = [op for op in self.operators if op.type == INPUT]
        self.output_operands = [operand for op in self.operators if op.type == OUTPUT
                                for operand in checks.unpack(op.input_operands)]
        self.state = GraphState.NEED_BUILD
        return self

    def missing_types(self) -> dict:
        """{PNNX type: [operator names]} for every type this model needs that no layer implements."""
        missing = {}
        for op in self.operators:
            if op.type not in STRUCTURAL and op.type not in self.custom_ops and not is_supported(op.type):
                missing.setdefault(op.type, []).append(op.name)
        return missing

    # ---- build: layers, order, fusion, first plan ---------------------------------------------------
    def build(self, allocate: bool = True) -> "RuntimeGraph":
        """allocate=False checks the shapes inferred at the recorded input shapes but makes no plan, so that
        the memory limit does not apply: for looking at a model (`kuiper inspect`), not running it."""
        try:
            return self._build(allocate)
        except Exception as e:  # opencl chosen by default: a model it cannot build runs on numpy, `choice` says why
            if self.choice is None or self.backend != "opencl":
                raise
            self.backend, self.device, self.choice = "numpy", None, self.choice.fallen_back(e)
            self.executor, self.state, self._plans = NumpyExecutor(), GraphState.NEED_INIT, OrderedDict()
            return self._build(allocate)

    def _build(self, allocate: bool) -> "RuntimeGraph":
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
        self.operators, self.untied = tied.drop_tied_inputs(self.operators)
        self.operands = {o.name: o for op in self.operators for o in op.output_operands}
        for op in self.operators:
            if op.type in self.custom_ops:
                op.layer = self.custom_ops.make_layer(op)
            elif op.type not in STRUCTURAL:
                op.layer = self.executor.make_layer(op)
            if op.layer is not None:
                op.layer.check_params_read()
        self.unfused_order = self._schedule()
        if self.executor.fuses:
            ends = {o.name for o in self.output_operands} | {op.output_operand.name for op in self.input_operators}
            joined = siblings.join(gated.join(cats.chain(self.unfused_order), ends, self.executor.gated_class), ends)
            moved = copies.compose(heads.join(joined, ends, self.executor.heads_class), ends, self.executor.chain_class)
            self.operators = fusion.fuse(moved, ends, self.executor.fused_class, on_device=self.executor.device)
            self.operands = {o.name: o for op in self.operators for o in op.output_operands}
        self.order = self._schedule()
        self.executor.build(self.order)
        recorded = [op.output_operand.shape for op in self.input_operators]
        if all(s is not None and all(isinstance(d, int) for d in s) for s in recorded):
            dtypes = [checks.input_dtype(op) for op in self.input_operators]
            signature = tuple(zip(map(tuple, recorded), dtypes))
            plan = self._layout(signature)
            checks.recorded_shapes(plan, self.operands, self.param_path)
            if allocate:
                self._check_memory(plan)
                self._keep(signature, plan)
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
        """The plan for these (shape, dtype) inputs: the kept one, else a new one, held to the memory limit
        before anything is allocated."""
        key = tuple(signature)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = self._layout(signature)
        self._check_memory(plan)
        return self._keep(key, plan)

    def _keep(self, key: tuple, plan: ExecutionPlan) -> ExecutionPlan:
        """Let the backend place a checked plan's buffers and choose its kernel variants, and keep it, dropping
        the least recently used plan first when max_plans are kept (first, so that the backend may reuse what
        it gives back)."""
        while len(self._plans) >= self.max_plans:
            self.executor.release(self._plans.popitem(last=False)[1])
        self.executor.prepare(plan, self.order)
        self._plans[key] = plan
        return plan

    def _layout(self, signature: list) -> ExecutionPlan:
        """Infer every operand's shape for these (shape, dtype) inputs and lay out buffers by liveness; nothing
        is allocated."""
        shapes, dtypes = {}, {}
        for op, (shape, dtype) in zip(self.input_operators, signature):
            shapes[op.output_operand.name] = checks.positive_shape(self.param_path, op, op.output_operand, shape)
            dtypes[op.output_operand.name] = dtype
        for op in self.order:
            if op.layer is None:
                continue
            out_shapes = op.layer.output_shapes([shapes[o.name] for o in op.input_operands])
            out_dtypes = op.layer.output_dtypes([dtypes[o.name] for o in op.input_operands])
            if len(out_shapes) != len(op.output_operands):
                raise ShapeError(f"{self.param_path}:{op.line}: {op.type} operator '{op.name}' makes "
                                 f"{len(out_shapes)} output(s), the file lists {len(op.output_operands)}")
            for operand, shape, dtype in zip(op.output_operands, out_shapes, out_dtypes):
                shapes[operand.name] = checks.positive_shape(self.param_path, op, operand, shape)
                dtypes[operand.name] = np.dtype(dtype)
        return layout(self.order, shapes, dtypes, {o.name for o in self.output_operands}, self.executor.device,
                      self.param_path)

    @property
    def memory_limit(self) -> int:
        """The most bytes one plan may ask for (runtime/memory.py): memory_limit=, KUIPER_MEMORY_LIMIT, or half
        of what the process may still use."""
        return self._memory_limit or memory.default_limit()

    def planned_bytes(self, plan: ExecutionPlan) -> int:
        """What forward allocates at the plan's shapes (runtime/memory.py)."""
        return memory.planned_bytes(plan, self.order, self.output_operands, self.executor.device)

    def _check_memory(self, plan: ExecutionPlan) -> None:
        memory.check(plan, self.planned_bytes(plan), self.memory_limit, self.operands, self.input_operators,
                     self.param_path)

    def _signature(self, inputs: tuple) -> tuple:
        """Check the arrays given to forward against the graph inputs; return them and their plan."""
        checks.input_count(self.input_operators, len(inputs), "forward", self.param_path)
        arrays = checks.input_arrays(self.input_operators, inputs)
        signature = [(tuple(x.shape), x.dtype) for x in arrays]
        checks.input_ranks(self.input_operators, signature)
        return arrays, checks.fitting(self.input_operators, signature, lambda: self._plan(signature))

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
            if not profile:
                self._run(op, plan, feeds)
                return
            started = time.perf_counter()
            self._run(op, plan, feeds)
            if op.layer is not None:
                host_times.append((op, time.perf_counter() - started))

        with self.executor.forward(plan):  # a backend may replay a recorded forward instead (opencl/replay.py)
            if trace or profile or not self.executor.replay(plan, self.input_operators, feeds):
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

    # ---- plans and information ------------------------------------------------------------------------
    @property
    def plans(self):
        """The execution plans kept, keyed by input signature ((shape, dtype) per input), the least recently
        used first: a read-only view (`clear_plans()` drops them)."""
        return types.MappingProxyType(self._plans)

    def clear_plans(self) -> None:
        """Drop every plan, its buffers going back to the backend, and the tensors the last forward left in the
        operands; the next forward plans anew."""
        while self._plans:
            self.executor.release(self._plans.popitem(last=False)[1])
        for operand in self.operands.values():
            operand.tensor = None

    def plan_for(self, *shapes) -> ExecutionPlan:
        """The execution plan (shapes, buffers) for inputs of these shapes, kept like forward's: float32 inputs,
        or integer ones where the file records an integer input."""
        return self._plan(self._shaped(shapes, "plan_for"))

    def layout_for(self, *shapes) -> ExecutionPlan:
        """The plan for inputs of these shapes as a layout only: every shape inferred and the buffers' sizes laid
        out (`planned_bytes`), but nothing allocated, kept or held to the memory limit."""
        return self._layout(self._shaped(shapes, "layout_for"))

    def _shaped(self, shapes, caller: str) -> list:
        if self.state != GraphState.COMPLETE:
            raise GraphError(f"{self.param_path}: build() the graph first")
        checks.input_count(self.input_operators, len(shapes), caller, self.param_path)
        signature = [(tuple(s), checks.input_dtype(op)) for s, op in zip(shapes, self.input_operators)]
        checks.input_ranks(self.input_operators, signature)
        return signature

    def __repr__(self):
        return f"RuntimeGraph({Path(self.param_path).name}, {len(self.operators)} operators, {self.state.name})"


def load(param_path, bin_path=None, backend: str = "auto", **options) -> RuntimeGraph:
    """Read, link and build a model in one call (backend: "auto", this machine's fastest (runtime/auto.py), "numpy",
    "reference" or "opencl"; options: device, schedule, tuning, precision for opencl; custom_ops, config files or
    directories of custom operators; memory_limit, the most bytes one plan may ask for; max_plans)."""
    return RuntimeGraph(param_path, bin_path, backend=backend, **options).build()
