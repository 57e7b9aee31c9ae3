"""OpenCL devices: which drivers the loader sees, which devices really work, and which one kuiper picks.

A device listed by its driver may still fail every build: the PoCL wheel from PyPI (LLVM 14) calls a CPU it
does not know 'generic' and its own compiler rejects that name. So kuiper checks each device once per
process (`probe`: build a tiny kernel, run it, compare) and its default choice takes working devices only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from kuiper.core.cpuinfo import cpu_flags
from kuiper.core.errors import BackendError

NO_PLATFORM_HINT = "no OpenCL platform found: install one, e.g. `pip install pocl-binary-distribution` (CPU)"
CPU_REMEDY = ("for CPU OpenCL install Intel's CPU runtime (pip install 'kuiper[intel]') or Debian's "
              "pocl-opencl-icd (apt install pocl-opencl-icd)")
GPU_REMEDY = "for a GPU install or update its vendor's OpenCL driver"

# Intel's CPU runtime from PyPI (the `intel` extra) ships an .icd that names a build machine's path, so the
# loader never finds it; kuiper writes a correct one (expose_pip_drivers).
INTEL_CPU_DISTRIBUTION = "intel-opencl-rt"
INTEL_CPU_LIBRARY = "libintelocl.so"
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")

PROBE_SOURCE = """
__kernel void probe(__global float* x, const float a, const int n) {
    const int i = get_global_id(0);
    if (i < n) {
        x[i] = x[i] * a + (float)i;
    }
}
"""
PROBE_ITEMS = 100  # not a multiple of any work-group size: the bounds check is exercised too

# What the driver's compiler targets, as its predefined macros say: PoCL's clang defines the instruction
# sets of the CPU it compiles for (an LLVM older than the CPU, as the PoCL wheel's LLVM 14, may take it for its
# predecessor and give AVX2's 16 vector registers where a newer LLVM gives AVX-512's 32); Intel's runtime
# defines none. gemm_cpu sizes its register block by it. Built with the probe, in the same program.
TARGET_MACROS = {"avx512f": "__AVX512F__", "avx2": "__AVX2__", "neon": "__ARM_NEON"}
TARGET_SOURCE = """
__kernel void target(__global int* bits) {
    bits[0] = 0
%s    ;
}
""" % "".join(f"#ifdef {macro}\n        | {1 << i}\n#endif\n" for i, macro in enumerate(TARGET_MACROS.values()))

# precision fp16 stores through these two core built-ins (cl/store.h): checked once before a device is used so
HALF_PROBE_SOURCE = """
__kernel void half_probe(__global half* y, __global const half* x, const float a) {
    const int i = get_global_id(0);
    vstore_half(vload_half(i, x) * a, i, y);
}
"""


def _cl():
    import pyopencl

    return pyopencl


# ---- drivers installed from PyPI ---------------------------------------------------------------------
_exposed = False


def expose_pip_drivers() -> str | None:
    """Make the CPU drivers installed from PyPI visible to pyopencl's ICD loader, which reads
    OCL_ICD_VENDORS (a folder of .icd files) at the first platform query of the process, so this runs before
    kuiper's first query. A value the user set is never changed. Returns the folder set, or None."""
    global _exposed
    if _exposed or "OCL_ICD_VENDORS" in os.environ:
        return None
    _exposed = True
    library = _pip_intel_library()
    if library is None:
        return None
    # OCL_ICD_VENDORS replaces the system folder, so its drivers (a GPU's, Debian's PoCL) are listed too
    icds = {f"system-{p.name}": p.read_text() for p in sorted(SYSTEM_VENDORS.glob("*.icd")) if p.is_file()}
    icds["pip-intel-cpu.icd"] = f"{library}\n"
    folder = _write_vendors(icds)
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return str(folder)


def _pip_intel_library() -> Path | None:
    from importlib import metadata

    try:
        files = metadata.distribution(INTEL_CPU_DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == INTEL_CPU_LIBRARY:
            path = Path(file.locate()).resolve()
            if path.exists():
                return path
    return None


def _write_vendors(icds: dict) -> Path:
    """A folder holding these .icd files, named by their content so processes share it; a temporary one
    when the cache folder cannot be written."""
    digest = hashlib.sha256(repr(sorted(icds.items())).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kuiper" / "icd" / digest
    try:
        cache.mkdir(parents=True, exist_ok=True)
        folder = cache
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="kuiper-icd-"))
    for name, text in icds.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            tmp = folder / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.replace(path)  # atomic: another process never reads half a file
    return folder


# ---- listing ------------------------------------------------------------------------------------------
def platforms() -> list:
    """Every OpenCL platform, or BackendError with a one-line hint when there is none."""
    expose_pip_drivers()
    cl = _cl()
    try:
        found = cl.get_platforms()
    except (cl.LogicError, cl.RuntimeError) as e:
        raise BackendError(f"{NO_PLATFORM_HINT} ({e})") from None
    if not found:
        raise BackendError(NO_PLATFORM_HINT)
    return found


def all_devices() -> list:
    """[(platform index, device index, platform, device)] in the order pyopencl lists them."""
    result = []
    for p, platform in enumerate(platforms()):
        for d, device in enumerate(platform.get_devices()):
            result.append((p, d, platform, device))
    return result


def is_gpu(device) -> bool:
    return bool(device.type & _cl().device_type.GPU)


def is_cpu(device) -> bool:
    return bool(device.type & _cl().device_type.CPU)


def across_bus(device) -> bool:
    """Whether the device has memory of its own, apart from the host's (a discrete GPU): uploads cross a bus."""
    if is_cpu(device):
        return False
    try:
        return not device.host_unified_memory
    except Exception:  # a driver that no longer answers the OpenCL 1.x query: take its memory as shared
        return False


def tensor_cores(device) -> bool:
    """Whether cl/gemm_mma.cl runs here: an NVIDIA GPU of compute capability 8.0 or newer (mma.sync on half),
    whose OpenCL compiler takes inline PTX. The compute capability comes from cl_nv_device_attribute_query."""
    if not is_gpu(device) or "cl_nv_device_attribute_query" not in device.extensions:
        return False
    try:
        return device.get_info(_cl().device_info.COMPUTE_CAPABILITY_MAJOR_NV) >= 8
    except Exception:  # a driver that lists the extension but answers nothing: no tensor cores to rely on
        return False


def describe(device) -> dict:
    cl = _cl()
    info = {
        "name": device.name.strip(),
        # (to_string gives "ALL | CPU" for PoCL's CPU, which also sets the DEFAULT bit)
        "type": " | ".join(kind for kind in ("GPU", "CPU", "ACCELERATOR", "CUSTOM")
                           if device.type & getattr(cl.device_type, kind)),
        "version": device.version,
        "driver": device.driver_version,
        "compute units": device.max_compute_units,
        "max work-group": device.max_work_group_size,
        "local memory KiB": device.local_mem_size // 1024,
        "global memory MiB": device.global_mem_size // 2**20,
    }
    if probe(device) is None:  # what a compiler targets is known once it has built the probe
        info["compiles for"] = ", ".join(sorted(target_features(device))) or "(the compiler does not say)"
    return info


def spec_of(device) -> str:
    """The "P:D" indices that name this device (kuiper devices prints them)."""
    return next(f"{p}:{d}" for p, d, _, dev in all_devices() if dev.int_ptr == device.int_ptr)


def label(p: int, d: int, device) -> str:
    """How messages name a device: its indices, name and platform."""
    return f"{p}:{d} {device.name.strip()} ({device.platform.name.strip()})"


def build_program(context, source: str | None, options: list, binary: bytes | None = None):
    """A program built from source every time (the driver may cache it itself): one that pyopencl loads from
    its own binary cache may carry no kernel argument info, which OpenCLRuntime.kernel reads. With `binary`
    (and no source), one made from what the context's device built before (kuiper/opencl/binaries.py)."""
    import warnings

    cl = _cl()
    with warnings.catch_warnings():
        # NVIDIA's compiler notes something about every kernel, which pyopencl turns into a warning per
        # build; PYOPENCL_COMPILER_OUTPUT=1 still shows the compiler's text
        if not os.environ.get("PYOPENCL_COMPILER_OUTPUT"):
            warnings.simplefilter("ignore", cl.CompilerWarning)
        program = cl.Program(context, source) if binary is None else cl.Program(context, context.devices, [binary])
        return program.build(options=options, cache_dir=False)


# ---- probing ------------------------------------------------------------------------------------------
_PROBES: dict = {}
_TARGETS: dict = {}  # device -> its compiler's TARGET_MACROS, found by the probe


def probe(device) -> str | None:
    """None when the device builds and runs a kernel correctly, else the reason in one line. Checked once
    per process and device."""
    key = device.int_ptr
    if key not in _PROBES:
        _PROBES[key] = _probe(device)
    return _PROBES[key]


#: Intel's CPU runtime's platform name
INTEL_CPU_PLATFORM = "Intel(R) OpenCL"
#: Intel's CPU runtime predefines none of TARGET_MACROS: it compiles for the CPU it runs on, or for the target that
#: CL_CONFIG_CPU_TARGET_ARCH names. The names its 2026.2 release takes (any other leaves the device unavailable),
#: by the TARGET_MACROS features their code uses
INTEL_TARGET_ARCHS = {"corei7": frozenset(), "corei7-avx": frozenset(), "core-avx2": frozenset({"avx2"}),
                      "skx": frozenset({"avx2", "avx512f"})}


def configured_target(device) -> frozenset | None:
    """The features a driver that names no target was told to compile for (Intel's runtime's
    CL_CONFIG_CPU_TARGET_ARCH), None where it was told nothing: it then compiles for this CPU."""
    arch = os.environ.get("CL_CONFIG_CPU_TARGET_ARCH")
    if device.platform.name != INTEL_CPU_PLATFORM or not arch:
        return None
    return INTEL_TARGET_ARCHS.get(arch)


def target_features(device) -> frozenset:
    """The names in TARGET_MACROS that the device's kernel compiler defines (empty where the probe failed)."""
    probe(device)
    return _TARGETS.get(device.int_ptr, frozenset())


def _probe(device) -> str | None:
    cl = _cl()
    x = np.linspace(-2, 2, PROBE_ITEMS, dtype=np.float32)
    bits = np.zeros(1, np.int32)
    try:
        context = cl.Context([device])
        queue = cl.CommandQueue(context)
        program = build_program(context, PROBE_SOURCE + TARGET_SOURCE, ["-cl-kernel-arg-info"])
        kernel = program.probe
        if kernel.get_arg_info(1, cl.kernel_arg_info.TYPE_NAME).strip() != "float":
            return "the driver reports wrong kernel argument types"
        buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
        kernel(queue, (128,), None, buffer, np.float32(3), np.int32(PROBE_ITEMS))
        y = np.empty_like(x)
        cl.enqueue_copy(queue, y, buffer, is_blocking=True)
        target = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, 4)
        program.target(queue, (1,), None, target)
        cl.enqueue_copy(queue, bits, target, is_blocking=True)
    except Exception as e:  # any failure of any driver makes the device unusable; say why
        return one_line(e)
    _TARGETS[device.int_ptr] = frozenset(name for i, name in enumerate(TARGET_MACROS) if bits[0] >> i & 1)
    expected = x * np.float32(3) + np.arange(PROBE_ITEMS, dtype=np.float32)
    if not np.allclose(y, expected, rtol=1e-6, atol=1e-6):
        return f"the test kernel computed wrong values (max error {float(np.abs(y - expected).max()):.3g})"
    return None


def half_probe(context, queue) -> str | None:
    """None when the device reads and writes half floats correctly (vload_half, vstore_half), else the reason."""
    cl = _cl()
    x = np.linspace(-2, 2, 128, dtype=np.float16)
    y = np.empty_like(x)
    try:
        kernel = build_program(context, HALF_PROBE_SOURCE, []).half_probe
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        source, result = cl.Buffer(context, flags, hostbuf=x), cl.Buffer(context, flags, hostbuf=y)
        kernel(queue, (128,), None, result, source, np.float32(3))
        cl.enqueue_copy(queue, y, result, is_blocking=True)
    except Exception as e:
        return one_line(e)
    expected = (x.astype(np.float32) * 3).astype(np.float16)
    if not np.array_equal(y, expected):
        return f"vload_half/vstore_half computed wrong values (max error {float(np.abs(y - expected).max()):.3g})"
    return None


def one_line(error) -> str:
    """The telling line of a driver's error: the compiler's first `error:` line when there is one."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "error:" in line.lower():
            return line[line.lower().index("error:"):][:200]
    return (lines[0] if lines else type(error).__name__)[:200]


def remedy(device) -> str:
    return GPU_REMEDY if is_gpu(device) else CPU_REMEDY


def usable_devices() -> list:
    """[(p, d, platform, device)] of the devices that pass `probe`, in the order the default choice tries
    them (`by_preference`)."""
    return [entry for entry in by_preference(all_devices()) if probe(entry[3]) is None]


def by_preference(devices: list) -> list:
    """GPUs, then CPUs, then the rest; among CPUs PoCL, then Intel's runtime, then a PoCL whose compiler leaves
    out AVX-512 on a CPU that has it; else the drivers' order.

    PoCL comes first where it compiles for the whole CPU: it then runs ResNet-18 as fast as Intel's runtime or
    faster. A PoCL whose LLVM is older than the CPU (the PoCL wheel's LLVM 14) may compile AVX2 code for a CPU
    with AVX-512, and is then slower than Intel's runtime. On a CPU without AVX-512 PoCL keeps its place,
    unmeasured (docs/tuning.md has the figures)."""
    host = cpu_flags()

    def rank(entry):
        device = entry[3]
        kind = 0 if is_gpu(device) else 1 if is_cpu(device) else 2
        if "portable computing language" not in entry[2].name.lower():
            return kind, 1
        short = kind == 1 and "avx512f" in host and "avx512f" not in target_features(device)
        return kind, 2 if short else 0

    return sorted(devices, key=rank)


# ---- choosing -----------------------------------------------------------------------------------------
def select_device(spec: str | None = None):
    """The device named by `spec`, KUIPER_CL_DEVICE or PYOPENCL_CTX ("P:D", "P", or a device or platform
    name: an exact device name first, else a substring), which must pass the probe; else the first working
    GPU, else the first working CPU."""
    devices = all_devices()
    spec = spec or os.environ.get("KUIPER_CL_DEVICE") or os.environ.get("PYOPENCL_CTX")
    if spec:
        p, d, _, device = _named(devices, spec)
        reason = probe(device)
        if reason is not None:
            raise BackendError(f"OpenCL device {label(p, d, device)} does not work: {reason}; {remedy(device)}")
        return device
    for p, d, _, device in by_preference(devices):
        if probe(device) is None:
            return device
    failures = "; ".join(f"{label(p, d, dev)}: {probe(dev)}" for p, d, _, dev in devices)
    remedies = sorted({remedy(dev) for _, _, _, dev in devices})
    raise BackendError(f"no working OpenCL device ({failures}); {'; '.join(remedies)}")


def _named(devices: list, spec: str) -> tuple:
    parts = spec.split(":")
    if all(part.strip().isdigit() for part in parts) and len(parts) <= 2:
        wanted = (int(parts[0]), int(parts[1]) if len(parts) == 2 else 0)
        for entry in devices:
            if entry[:2] == wanted:
                return entry
        raise BackendError(f"no OpenCL device {spec!r}: {_listing(devices)}")
    needle = spec.strip().lower()
    exact = [e for e in devices if e[3].name.strip().lower() == needle]
    partial = [e for e in devices if needle in e[3].name.lower() or needle in e[2].name.lower()]
    if exact or partial:
        return (exact or partial)[0]
    raise BackendError(f"no OpenCL device matches {spec!r}: {_listing(devices)}")


def _listing(devices) -> str:
    return "available: " + ", ".join(f"{p}:{d} {dev.name.strip()}" for p, d, _, dev in devices)
