"""What the CPU kuiper runs on can do, as Linux lists it: its feature flags (avx2, avx512f, ...). Both backends
ask: numpy's (which kernels OpenBLAS should run, kuiper/cpu/blas.py) and OpenCL's (which CPU driver compiles
for all of it, kuiper/opencl/devices.py; which register block gemm_cpu takes, kuiper/opencl/gemm.py)."""

from functools import lru_cache


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """The CPU's feature flags as Linux lists them; empty elsewhere (so nothing is assumed there). Read once:
    the GEMM rule asks on every launch that picks by rule."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()
