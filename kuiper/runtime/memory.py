"""The memory limit: how many bytes of buffers one execution plan may ask for.

A plan's buffers are allocated when it is made, so an input shape or a corrupt parameter that asks for terabytes
would end in numpy's MemoryError (or the kernel's OOM killer) after other work. The graph compares each new plan's
bytes with this limit first and refuses with MemoryLimitError, allocating nothing.

The limit is, first found: `memory_limit=` on RuntimeGraph/load; the KUIPER_MEMORY_LIMIT environment variable;
half of the memory the process may use, that is the smaller of physical memory and a cgroup's memory.max and,
when the process has an address-space limit (RLIMIT_AS, `ulimit -v`), what is left of it. Half, because a forward
needs more than its plan (weights, the layers' work buffers, numpy's temporaries). Sizes are a number of bytes,
or a number with K, M, G or T (powers of 1024): 512M, 2G, 1.5G.
"""

from __future__ import annotations

import os
import re

from kuiper.core.errors import ConfigError, MemoryLimitError
from kuiper.runtime.checks import fmt
from kuiper.core.operators import INPUT

ENV = "KUIPER_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?)([KMGT]?)(?:i?B)?", re.IGNORECASE)


def configured(limit) -> int | None:
    """The limit given (bytes, or a size string), else the environment's; None leaves it to `default_limit`."""
    if limit is None:
        text = os.environ.get(ENV)
        return None if text is None or not text.strip() else parse_size(text, ENV)
    if isinstance(limit, str):
        return parse_size(limit, "memory_limit")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"memory_limit={limit!r}: give a positive number of bytes or a size such as '2G'")
    return limit


def parse_size(text: str, where: str) -> int:
    m = _SIZE.fullmatch(text.strip())
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()]) if m else 0
    if size < 1:
        raise ConfigError(f"{where}={text!r} is not a size: give bytes, or a number with K, M, G or T (512M, 2G)")
    return size


def default_limit() -> int:
    """Half of what this process may still use: physical memory, a cgroup's memory.max, the rest of RLIMIT_AS."""
    available = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    cgroup = _read("/sys/fs/cgroup/memory.max")
    if cgroup is not None and cgroup.isdigit():
        available.append(int(cgroup))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, AttributeError):  # not on this platform
        soft = -1
    if soft >= 0:  # RLIM_INFINITY is -1
        available.append(max(soft - address_space(), 0))
    return max(min(available) // 2, 1)


def address_space() -> int:
    """Bytes of address space this process holds now (0 where /proc is not there to say)."""
    statm = _read("/proc/self/statm")
    return int(statm.split()[0]) * os.sysconf("SC_PAGE_SIZE") if statm else 0


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def format_bytes(n: int) -> str:
    """512 B, 1.5 MiB, 9.0 TiB; a corrupt shape's astronomical sizes as a power of two."""
    if n < 1024:
        return f"{n} B"
    for shift, unit in ((10, "KiB"), (20, "MiB"), (30, "GiB"), (40, "TiB")):
        if n < 1 << (shift + 10) or unit == "TiB" and n < 1 << 90:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"about 2^{n.bit_length() - 1} B"


def planned_bytes(plan, order: list, output_operands: list, device: bool) -> int:
    """What forward allocates at the plan's shapes: its pooled buffers and, on the host, the graph outputs
    (new arrays each forward, for the caller to keep) and the layers' work buffers (Layer.workspace_bytes):
    all those layers keep, and the largest of the temporary ones."""
    if device:
        return plan.pooled_bytes
    outputs = sum(plan.nbytes(o.name) for o in output_operands)
    kept, temporary = 0, 0
    for op in order:
        if op.layer is not None:
            work = op.layer.workspace_bytes([plan.shapes[o.name] for o in op.input_operands])
            kept, temporary = (kept + work, temporary) if op.layer.keeps_workspace else (kept, max(temporary, work))
    return plan.pooled_bytes + outputs + kept + temporary


def check(plan, needed: int, limit: int, operands: dict, input_operators: list, path: str) -> None:
    """Refuse a plan that needs more than `limit` bytes, naming its largest operand and the inputs' shapes."""
    if needed <= limit:
        return
    name = max((n for n in plan.shapes if operands[n].producer.type != INPUT), key=plan.nbytes,
               default=next(iter(plan.shapes)))
    op = operands[name].producer
    inputs = ", ".join(fmt(plan.shapes[o.output_operand.name]) for o in input_operators)
    raise MemoryLimitError(
        f"{path}:{op.line}: {op.type} operator '{op.name}' makes {name} of shape {fmt(plan.shapes[name])} "
        f"({format_bytes(plan.nbytes(name))}), and at input shape(s) {inputs} the plan needs "
        f"{format_bytes(needed)}, over the memory limit of {format_bytes(limit)} (memory_limit=, {ENV})"
    )
