"""backend="auto", the default: the fastest correct backend this machine has, chosen by a rule over the OpenCL
devices that the probe finds usable (kuiper/opencl/devices.py), once per process:

  1. a usable OpenCL GPU: opencl on the first one;
  2. else Intel's CPU OpenCL runtime, where usable: opencl on it. It ran ResNet-18 faster than the numpy backend
     at batch 1 and 8 on every CPU it was measured on (docs/performance.md);
  3. else numpy. PoCL on a CPU is left out: whether it beats numpy depends on the CPU (docs/performance.md).

A rule over the probed devices costs one probe of the candidates; a timing run at every load would cost
forwards. fp32 only. KUIPER_BACKEND (numpy, reference, opencl or auto) replaces the default; a device named
(device=, KUIPER_CL_DEVICE) means opencl on it. Where the opencl build of a model fails, the graph falls back to
numpy (runtime/graph.py), and its `choice` says why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kuiper.core.errors import BackendError, ConfigError
from kuiper.opencl import devices
from kuiper.runtime.backends import BACKENDS

AUTO = "auto"
ENV = "KUIPER_BACKEND"
#: the names `backend=` takes
CHOICES = (AUTO,) + BACKENDS


@dataclass(frozen=True)
class Choice:
    """What a default backend became: the backend, the OpenCL device ("P:D", or None: the usual choice) and why."""

    backend: str
    device: str | None
    reason: str

    def fallen_back(self, error: Exception) -> "Choice":
        first = (str(error).splitlines() or [type(error).__name__])[0].rstrip(":")
        return Choice("numpy", None, f"{self.reason}; opencl failed on this model: {first}")


@dataclass(frozen=True)
class Candidate:
    """What the rule reads of a device: its "P:D", its kind (GPU, CPU or other) and its platform's name."""

    spec: str
    kind: str
    platform: str


def rule(candidates: list, problem) -> Choice:
    """The choice among `candidates` (GPUs first, then in the drivers' order); `problem(candidate)` is None for
    a usable device, else why not, and is asked only of the devices the rule would take."""
    for candidate in candidates:
        if candidate.kind == "GPU" and problem(candidate) is None:
            return Choice("opencl", candidate.spec, "auto: a usable OpenCL GPU")
    for candidate in candidates:
        if candidate.kind == "CPU" and candidate.platform == devices.INTEL_CPU_PLATFORM and problem(candidate) is None:
            return Choice("opencl", candidate.spec, "auto: no GPU; Intel's CPU runtime runs faster than numpy")
    return Choice("numpy", None, "auto: no usable OpenCL GPU or Intel CPU runtime")


_resolved: Choice | None = None


def resolved() -> Choice:
    """The rule's choice on this machine's devices, worked out at the first call of the process."""
    global _resolved
    if _resolved is None:
        _resolved = _on_this_machine()
    return _resolved


def _on_this_machine() -> Choice:
    try:
        listed = devices.all_devices()
    except Exception as e:  # no OpenCL at all (no platform, no loader): numpy, saying why
        return Choice("numpy", None, f"auto: no OpenCL ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    found = {f"{p}:{d}": device for p, d, _, device in listed}
    candidates = [Candidate(f"{p}:{d}", "GPU" if devices.is_gpu(dev) else "CPU" if devices.is_cpu(dev) else "other",
                            platform.name.strip()) for p, d, platform, dev in listed]
    return rule(candidates, lambda candidate: devices.probe(found[candidate.spec]))


def settle(backend: str, device: str | None) -> tuple:
    """(backend, device, Choice or None) for what a graph was asked: a named backend stays as it is, and so does
    KUIPER_BACKEND's in place of "auto" (Choice None); else "auto" becomes opencl on a named device, else the
    rule's choice."""
    if backend == AUTO and os.environ.get(ENV, AUTO) != AUTO:
        value = os.environ[ENV]
        if value not in BACKENDS:
            raise ConfigError(f"{ENV}={value!r}: give one of {', '.join(CHOICES)}")
        return value, device, None
    if backend not in CHOICES:
        raise BackendError(f"unknown backend {backend!r} (available: {', '.join(CHOICES)})")
    if backend != AUTO:
        return backend, device, None
    named = device or os.environ.get("KUIPER_CL_DEVICE")
    if named:
        return "opencl", device, Choice("opencl", device, f"auto: OpenCL device {named!r} named")
    choice = resolved()
    return choice.backend, choice.device, choice


def said(graph) -> str:
    """The line that says what a default backend became: `backend: opencl on DEVICE (PLATFORM) (why)`."""
    device = graph.runtime.device if graph.runtime is not None else None
    where = f" on {device.name.strip()} ({device.platform.name.strip()})" if device is not None else ""
    return f"backend: {graph.backend}{where} ({graph.choice.reason})"
