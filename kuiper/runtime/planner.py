"""Memory planning by liveness.

Every operand an operator writes lives from the step that produces it to the last step that reads it.
Two operands may share one buffer only when their lifetimes do not overlap. The C++ original reused
buffers whenever the sizes matched, which broke branched graphs (a ResNet skip connection is still
needed after the main branch has produced a tensor of the same size: KuiperInfer issue #60). Planning
from lifetimes over the fixed execution order makes reuse safe by construction.

The algorithm is a greedy walk over the steps with a best-fit free list:
  at step i, first give each operand born at i the smallest free buffer that fits (or grow the largest
  free one, or make a new one), then return to the free list every buffer whose operand dies at i.
Outputs are placed before the step's dying inputs are released, so an operator never writes into a
buffer it is still reading.

The assignment is plain data (slots and sizes), so the numpy backend and the OpenCL buffer pool share it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from kuiper.core.errors import ShapeError
from kuiper.runtime.checks import fmt


@dataclass(frozen=True)
class Lifetime:
    """An operand that needs a buffer: `size` bytes, written at step `first`, last read at step `last`."""

    key: object
    size: int
    first: int
    last: int


@dataclass
class BufferAssignment:
    """Which slot each operand uses, and how large each slot must be."""

    slot_of: dict = field(default_factory=dict)
    slot_sizes: list = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(self.slot_sizes)


def assign_buffers(lifetimes: list) -> BufferAssignment:
    """Give every lifetime a slot so that overlapping lifetimes never share one (best-fit reuse)."""
    result = BufferAssignment()
    born = {}
    dying = {}
    for life in lifetimes:
        if life.last < life.first:
            raise ValueError(f"lifetime of {life.key!r} ends before it starts")
        born.setdefault(life.first, []).append(life)
        dying.setdefault(life.last, []).append(life)

    free = []  # sorted list of (size, slot)
    for step in sorted(set(born) | set(dying)):
        # larger operands first: they have the fewest buffers to choose from
        for life in sorted(born.get(step, ()), key=lambda l: -l.size):
            result.slot_of[life.key] = _take(free, result.slot_sizes, life.size)
        for life in dying.get(step, ()):
            slot = result.slot_of[life.key]
            bisect.insort(free, (result.slot_sizes[slot], slot))
    return result


def _take(free: list, slot_sizes: list, size: int) -> int:
    """Best fit: the smallest free slot holding `size` bytes; else grow the largest free slot; else a new one."""
    i = bisect.bisect_left(free, (size, -1))
    if i < len(free):
        return free.pop(i)[1]
    if free:
        _, slot = free.pop()
        slot_sizes[slot] = size
        return slot
    slot_sizes.append(size)
    return len(slot_sizes) - 1


# ---- plans: what a graph keeps per input signature -------------------------------------------------
class ExecutionPlan:
    """Everything forward needs for one set of input shapes: every operand's shape and dtype, the buffers
    laid out by liveness, the kernel variants chosen, and the waits a buffer's reuse needs. The backend gives
    the plan its buffers (`place`): numpy arrays or OpenCL buffers from the pool, one per slot. Until then the
    plan is only a layout, its sizes known and nothing allocated (what the memory limit is checked against).

    `aliases` ({operand name: operand name}) are the outputs of operators that work in place: they get no
    buffer of their own but a view, under their own shape, of the buffer of the operand they overwrite (a
    reshape's output is its input's elements in the same order)."""

    def __init__(self, shapes: dict, dtypes: dict, lifetimes: list, aliases: dict):
        self.shapes = shapes
        self.dtypes = dtypes
        self.lifetimes = lifetimes
        self.assignment = assign_buffers(lifetimes)
        self.aliases = aliases
        self.slots = []
        self.tensors = {}      # operand name -> the tensor forward writes it into
        self.variants = {}     # operator name -> the variant chosen for these shapes
        self.reuse_waits = {}  # operator name -> operators it must wait for (see reuse_waits)
        self.replay = None     # a recorded forward that the backend enqueues again (kuiper/opencl/replay.py)
        self.forwards = 0      # forwards run with this plan (the OpenCL executor records the second)

    def place(self, slots: list, view) -> None:
        """Give every pooled operand its tensor, `view(slot, shape, dtype)`, and every alias a view of the slot of
        the operand at the start of its chain."""
        self.slots = slots
        for name in [life.key for life in self.lifetimes] + list(self.aliases):
            owner = name
            while owner in self.aliases:
                owner = self.aliases[owner]
            self.tensors[name] = view(slots[self.assignment.slot_of[owner]], self.shapes[name], self.dtypes[name])

    @property
    def pooled_bytes(self) -> int:
        return self.assignment.total_bytes

    def nbytes(self, name: str) -> int:
        """The bytes of operand `name` at this plan's shapes."""
        return math.prod(self.shapes[name]) * self.dtypes[name].itemsize

    def unpooled_bytes(self) -> int:
        """What the same operands would take with one buffer each (the baseline: no planning, nothing in place)."""
        return sum(life.size for life in self.lifetimes) + sum(self.nbytes(name) for name in self.aliases)


def layout(order: list, shapes: dict, dtypes: dict, graph_outputs: set, device: bool, path: str) -> "ExecutionPlan":
    """The plan for these inferred shapes: the operands that overwrite another (the fusion pass marked them),
    which must keep that operand's size at any input shape, and the buffers laid out by liveness. Nothing is
    allocated: the backend places the buffers (`ExecutionPlan.place`) once the plan has passed its checks."""
    aliases = {}
    for op in order:
        for operand in op.output_operands:
            source = operand.overwrites
            if source is None:
                continue
            if (math.prod(shapes[operand.name]) != math.prod(shapes[source.name])
                    or dtypes[operand.name] != dtypes[source.name]):
                raise ShapeError(f"{path}: '{op.name}' writes over its input '{source.name}', but at these input "
                                 f"shapes its output {fmt(shapes[operand.name])} {dtypes[operand.name]} does not "
                                 f"fit that input's {fmt(shapes[source.name])} {dtypes[source.name]}")
            aliases[operand.name] = source.name
    return ExecutionPlan(shapes, dtypes, lifetimes(order, shapes, dtypes, graph_outputs, device), aliases)


def lifetimes(order: list, shapes: dict, dtypes: dict, graph_outputs: set, device: bool) -> list:
    """Each pooled operand's size and the steps it lives between (its producer, its last reader), over the
    operators in execution order.

    On the host (device=False) the graph inputs are the caller's arrays and the outputs are fresh arrays per
    forward, so neither is pooled; on a device both get buffers, the outputs alive until the end. An operand
    that overwrites another has no buffer of its own: the one it overwrites lives until its last reader."""
    step = {op.name: i for i, op in enumerate(order)}
    last = {}  # operand -> the last step reading its buffer, under any of its names
    for op in reversed(order):
        for operand in op.output_operands:
            readers = [step[c.name] for c in operand.consumers] + [last.get(operand.name, step[op.name])]
            source = operand.overwrites.name if operand.overwrites is not None else operand.name
            last[source] = max(max(readers), last.get(source, 0))
    result = []
    for op in order:
        if op.layer is None and not (device and not op.input_operands):  # structural; a device uploads inputs
            continue
        for operand in op.output_operands:
            if operand.overwrites is not None or (operand.name in graph_outputs and not device):
                continue
            end = len(order) if operand.name in graph_outputs else last[operand.name]
            nbytes = math.prod(shapes[operand.name]) * dtypes[operand.name].itemsize
            result.append(Lifetime(operand.name, nbytes, step[op.name], end))
    return result


def reuse_waits(lives: list, assignment: BufferAssignment, operands: dict) -> dict:
    """{operator name: operators it must wait for because it writes a reused buffer}.

    An in-order queue runs kernels one after another, so reusing a buffer is safe. On an out-of-order queue
    (schedule="levels") a kernel waits only for the events it is given: one that writes into a buffer must
    also wait for everyone still reading the buffer's previous tenant, under any of its names (or, with no
    readers, for the previous tenant's writer)."""
    names = {}  # buffer owner -> the operands living in its buffer
    for operand in operands.values():
        owner = operand
        while owner.overwrites is not None:
            owner = owner.overwrites
        names.setdefault(owner.name, []).append(operand)
    previous = {}  # slot -> operand name last placed there
    waits = {}
    for life in sorted(lives, key=lambda l: l.first):
        slot = assignment.slot_of[life.key]
        before = previous.get(slot)
        previous[slot] = life.key
        if before is None:
            continue
        readers = [c for operand in names[before] for c in operand.consumers]
        writer = operands[life.key].producer
        waits.setdefault(writer.name, []).extend(readers or [operands[before].producer])
    return waits
