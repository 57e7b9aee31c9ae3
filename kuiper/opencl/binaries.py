"""Built programs kept on disk, for a driver that keeps none itself.

Intel's CPU runtime compiles every program again in every process, most of a short `kuiper run --backend
opencl`'s time, where PoCL and NVIDIA's driver keep their builds and load them back.
The driver hands out what it built (the program's binaries) and makes a program from them without compiling
again, so kuiper keeps them for it. A program made from a binary may carry no kernel argument information,
which OpenCLRuntime.kernel reads to type scalar arguments, so each kernel's argument type names are kept
beside it.

An entry is <folder>/<key>.bin with <key>.json, key = a hash of the device, its driver's version and settings,
the build options and the kernel source with its headers: a new driver or an edited kernel misses and builds
anew.
The folder is KUIPER_PROGRAM_CACHE (`off` turns the cache off), else $XDG_CACHE_HOME/kuiper/programs, else
~/.cache/kuiper/programs. An entry that will not load is built from source and written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from kuiper.opencl.devices import INTEL_CPU_PLATFORM, build_program

#: the platforms whose drivers keep no build of their own
UNCACHED_PLATFORMS = (INTEL_CPU_PLATFORM,)


def folder(device) -> Path | None:
    """Where this device's builds are kept, or None where its driver keeps them itself or the cache is off."""
    if device.platform.name not in UNCACHED_PLATFORMS:
        return None
    explicit = os.environ.get("KUIPER_PROGRAM_CACHE")
    if explicit == "off":
        return None
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kuiper" / "programs"


def key(device, options: tuple, digest: str) -> str:
    """The entry's name for a program of this source digest built with these options on this device, under the
    driver's settings: Intel's runtime reads CL_CONFIG_* variables, CL_CONFIG_CPU_TARGET_ARCH the instruction set
    it compiles for (a build kept for AVX-512 was loaded after the variable asked for AVX, and ran as such)."""
    settings = " ".join(f"{name}={value}" for name, value in sorted(os.environ.items())
                        if name.startswith("CL_CONFIG_"))
    parts = (device.platform.name, device.name, device.driver_version, settings, " ".join(options), digest)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def load(where: Path, name: str, context, options: tuple):
    """(program, {kernel: [argument type names]}) from entry `name`, or None when there is none that loads."""
    import pyopencl as cl

    try:
        binary = (where / f"{name}.bin").read_bytes()
        types = json.loads((where / f"{name}.json").read_text())
        program = build_program(context, None, list(options), binary=binary)
    except (OSError, ValueError, cl.Error):
        return None
    return program, types


def save(where: Path, name: str, program, types: dict) -> None:
    """Write the entry, each file whole or not at all (another process may read it meanwhile); a folder that
    cannot be written leaves the cache empty, nothing worse."""
    try:
        where.mkdir(parents=True, exist_ok=True)
        _write(where / f"{name}.json", json.dumps(types).encode())
        _write(where / f"{name}.bin", program.binaries[0])
    except OSError:
        pass


def _write(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
        raise
