"""Which kernels numpy's OpenBLAS runs, and the fix when it does not know the CPU.

OpenBLAS picks its kernels when it loads, from the CPU's model number. A CPU newer than the OpenBLAS build
gets kernels by a fallback: numpy 2.4's OpenBLAS 0.3.31 runs its Haswell (AVX2) kernels on AMD CPUs newer than
itself that have AVX-512, and multiplies float32 matrices at about half the speed of its SkylakeX (AVX-512)
kernels (docs/tuning.md). The environment variable OPENBLAS_CORETYPE, read only when the library loads,
overrides the choice.

Where kuiper starts the process (the `kuiper` command, `python -m kuiper`, the benchmarks) it runs itself
again with OPENBLAS_CORETYPE=SkylakeX when it sees that misreading (`restart_if_misread`). A program that
imports kuiper has loaded numpy already: it gets a one-line warning saying what to set (`warn_if_misread`).
A value the user set is never changed.
"""

from __future__ import annotations

import os
import sys
import warnings
from functools import lru_cache

from kuiper.core.cpuinfo import cpu_flags
from kuiper.core.errors import KuiperWarning

#: the CPU features OpenBLAS's SkylakeX kernels use
AVX512 = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
#: OpenBLAS core types whose single-precision kernels are AVX-512 ones, as threadpoolctl names them
AVX512_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
FIX = "SkylakeX"
_RESTARTED = "KUIPER_BLAS_RESTARTED"  # set in the process we start again: never a second restart
_warned = False


def openblas_core() -> str | None:
    """The core type the loaded OpenBLAS chose (threadpoolctl's `architecture`), or None without OpenBLAS."""
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas" and lib.get("architecture"):
            return lib["architecture"]
    return None


def misread(flags: frozenset, core: str | None) -> bool:
    """True when the CPU has AVX-512 but OpenBLAS runs kernels without it."""
    return core is not None and AVX512 <= flags and core.lower() not in AVX512_CORES


@lru_cache(maxsize=1)
def diagnosis() -> str | None:
    """What to tell the user when OpenBLAS misreads this CPU and they have not chosen a core type; else None."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    core = openblas_core()
    if not misread(cpu_flags(), core):
        return None
    return (f"numpy's OpenBLAS runs its {core} kernels on this CPU, which has AVX-512 (it does not know the CPU "
            f"model): set OPENBLAS_CORETYPE={FIX} before numpy is imported for about twice the speed in matrix products")


def restart_if_misread() -> None:
    """Run this process again with OPENBLAS_CORETYPE set, when OpenBLAS misreads the CPU (see the module's
    docstring). Call it first thing, before any work: nothing after it runs in this process then."""
    if os.environ.get(_RESTARTED) or diagnosis() is None:
        return
    os.environ["OPENBLAS_CORETYPE"] = FIX
    os.environ[_RESTARTED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def warn_if_misread() -> None:
    """One warning per process, for programs that import kuiper after numpy has chosen its kernels."""
    global _warned
    text = diagnosis()
    if text is not None and not _warned:
        _warned = True
        warnings.warn(text, KuiperWarning, stacklevel=3)
