"""Soak test: does a long-running process keep its memory steady?

    python benchmarks/soak.py [--model resnet18] [--backend numpy] [--forwards 1000] [--cycles 200]
                              [--sizes 100] [--every 100] [--tolerance 32]

Three phases on a committed model, printing the resident set size (RSS) every --every steps:
  forwards  one graph, the same input again and again;
  cycles    load, forward, del: a service that reloads its model (and collects garbage: a graph's operators,
            operands and layers refer to each other, so only Python's cycle collector frees a dropped graph;
            --no-collect leaves that to the collector's own schedule, and RSS then climbs to a plateau
            several graphs high);
  sizes     one graph fed images of twice max_plans sizes in turn, so that every forward makes a plan and
            drops the least recently used one (RuntimeGraph's plan cache): memory must stay bounded.
Each phase's growth is measured from the RSS after its first steps (the first round of sizes), once the
buffers it makes once (plans, the layers' work buffers, the mapped weights) exist. The script exits 1 when a
phase grows by more than --tolerance MiB. RSS comes from /proc/self/statm; where there is no /proc, the peak
from getrusage.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kuiper  # noqa: E402

#: steps a phase runs before its baseline RSS is taken: the first forward of each plan makes its buffers
WARMUP = 10


def rss() -> int:
    """Resident bytes now (or the peak so far, where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def mib(n: int) -> str:
    return f"{n / 2**20:8.1f} MiB"


def phase(name: str, steps: int, step, every: int, warmup: int = WARMUP) -> int:
    """Run step(i) `steps` times, print RSS every `every` steps; return the growth after `warmup` steps."""
    start = time.perf_counter()
    baseline = None
    for i in range(steps):
        step(i)
        if i + 1 == min(warmup, steps):
            gc.collect()
            baseline = rss()
        if (i + 1) % every == 0 or i + 1 == steps:
            gc.collect()
            print(f"  {name:<8} {i + 1:>5}/{steps}  rss {mib(rss())}  ({time.perf_counter() - start:6.1f} s)",
                  flush=True)
    growth = rss() - baseline
    print(f"  {name:<8} growth after {warmup} steps: {mib(growth)}")
    return growth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="a directory of models/ (default resnet18)")
    parser.add_argument("--backend", default="numpy", choices=("numpy", "reference", "opencl"))
    parser.add_argument("--forwards", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--sizes", type=int, default=100)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--tolerance", type=float, default=32.0, help="MiB a phase may grow (default 32)")
    parser.add_argument("--no-collect", action="store_true", help="cycles: no gc.collect() after each del")
    args = parser.parse_args()

    param = ROOT / "models" / args.model / f"{args.model}.pnnx.param"
    print(f"{param.name} on {args.backend}, rss at start {mib(rss())}")
    graph = kuiper.load(param, backend=args.backend)
    shape = graph.input_operators[0].output_operand.shape
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)

    growth = {"forwards": phase("forwards", args.forwards, lambda i: graph.forward(x), args.every)}

    def cycle(i):
        model = kuiper.load(param, backend=args.backend)
        model.forward(x)
        del model
        if not args.no_collect:
            gc.collect()

    growth["cycles"] = phase("cycles", args.cycles, cycle, max(1, args.every // 5))

    sizes = 2 * graph.max_plans  # more than are kept: each forward plans anew and drops the oldest plan

    def next_size(i):
        side = 64 + 8 * (i % sizes)
        graph.forward(np.zeros(shape[:-2] + (side, side), np.float32))

    growth["sizes"] = phase("sizes", args.sizes, next_size, max(1, args.every // 5), warmup=sizes)
    print(f"plans kept: {len(graph.plans)} (max_plans {graph.max_plans}); rss at end {mib(rss())}")
    over = {name: g for name, g in growth.items() if g > args.tolerance * 2**20}
    if over:
        print("grew more than the tolerance: " + ", ".join(f"{n} {mib(g).strip()}" for n, g in over.items()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
