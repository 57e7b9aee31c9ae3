"""Rounds of fresh processes: how the benchmarks time engines that must not disturb each other.

Engines sharing a process disturb each other: measured here, kuiper's forward ran 10-25% slower right after
torch's than before it (torch's OpenMP threads linger). So every job (an engine on a model) runs in a fresh
process of its own, one after another, and the whole list again each round: every job gets a clean start and
the same drifts of a noisy machine, and ratios taken within a round cancel most of those drifts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run_rounds(jobs: dict, rounds: int, progress=None) -> dict:
    """{key: [the JSON object its command wrote, per round]}. `jobs` maps a key to a command line, which is
    given `--json FILE` at its end and must write its result there; a command that fails gives None that
    round, with the last line it printed under "error"."""
    results = {key: [] for key in jobs}
    with tempfile.TemporaryDirectory() as folder:
        result_file = Path(folder) / "result.json"
        for round_ in range(rounds):
            for key, command in jobs.items():
                if progress:
                    progress(round_, key)
                result_file.unlink(missing_ok=True)
                done = subprocess.run([*command, "--json", str(result_file)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
                if done.returncode or not result_file.exists():
                    said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
                    results[key].append({"error": said})
                else:
                    results[key].append(json.loads(result_file.read_text()))
    return results


def python(script: Path, *args) -> list:
    """A command line running `script` with this interpreter."""
    return [sys.executable, str(script), *map(str, args)]


def machine() -> str:
    """The CPU's model name and widest SIMD, and the core count: every figure is named with its hardware."""
    import os

    from kuiper.cpu.blas import AVX512
    from kuiper.core.cpuinfo import cpu_flags

    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    # a VM may call its CPU just "AMD EPYC": the family and model numbers tell the generation (25: Zen 3/4)
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    flags = cpu_flags()
    simd = "AVX-512" if AVX512 <= flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name}, {simd}, {os.cpu_count()} cores"
