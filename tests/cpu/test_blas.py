"""kuiper/cpu/blas.py: noticing that numpy's OpenBLAS runs kernels without AVX-512 on a CPU that has it."""

import os
import subprocess
import sys
import warnings

import pytest

from kuiper import KuiperWarning
from kuiper.cpu import blas

ZEN5 = frozenset("fpu sse2 avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16".split())
AVX2_ONLY = frozenset("fpu sse2 avx avx2 fma".split())


@pytest.mark.parametrize("flags, core, expected", [
    (ZEN5, "Haswell", True),          # issue #16: a Zen 5 that OpenBLAS 0.3.31 does not know
    (ZEN5, "Zen", True),
    (ZEN5, "SkylakeX", False),
    (ZEN5, "SAPPHIRERAPIDS", False),  # names compare without case
    (AVX2_ONLY, "Haswell", False),    # nothing faster to choose
    (ZEN5 - {"avx512vl"}, "Haswell", False),  # SkylakeX kernels need every one of the five
    (ZEN5, None, False),              # no OpenBLAS loaded (another BLAS)
])
def test_misread(flags, core, expected):
    assert blas.misread(flags, core) is expected


@pytest.fixture
def fresh_diagnosis(monkeypatch):
    monkeypatch.setattr(blas, "_warned", False)
    blas.diagnosis.cache_clear()
    yield
    blas.diagnosis.cache_clear()


def test_warns_once_with_the_fix(monkeypatch, fresh_diagnosis):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(blas, "cpu_flags", lambda: ZEN5)
    monkeypatch.setattr(blas, "openblas_core", lambda: "Haswell")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        blas.warn_if_misread()
        blas.warn_if_misread()
    assert [w.category for w in said] == [KuiperWarning]
    text = str(said[0].message)
    assert "Haswell" in text and "OPENBLAS_CORETYPE=SkylakeX" in text and "\n" not in text


def test_a_core_type_the_user_chose_is_left_alone(monkeypatch, fresh_diagnosis):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setattr(blas, "cpu_flags", lambda: ZEN5)
    monkeypatch.setattr(blas, "openblas_core", lambda: "Haswell")
    assert blas.diagnosis() is None


def test_this_machine_reports_a_core():
    """threadpoolctl finds numpy's OpenBLAS (the numpy wheels bundle it) and names the kernels it chose."""
    import numpy  # noqa: F401

    assert blas.openblas_core()


def test_restart_runs_the_same_command_with_the_fix(tmp_path):
    """In a process where OpenBLAS is made to look misreading, restart_if_misread starts the same command
    again with OPENBLAS_CORETYPE set, once."""
    script = tmp_path / "restart.py"
    script.write_text(
        "import os, sys\n"
        "from kuiper.cpu import blas\n"
        "blas.cpu_flags = lambda: blas.AVX512\n"
        "blas.openblas_core = lambda: 'SkylakeX' if os.environ.get('OPENBLAS_CORETYPE') else 'Haswell'\n"
        "print('start', os.environ.get('OPENBLAS_CORETYPE'), sys.argv[1:], flush=True)\n"
        "blas.restart_if_misread()\n"
        "print('after', os.environ.get('OPENBLAS_CORETYPE'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "KUIPER_BLAS_RESTARTED")}
    done = subprocess.run([sys.executable, str(script), "an-argument"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["start None ['an-argument']", "start SkylakeX ['an-argument']",
                                        "after SkylakeX"]
