"""The OpenCL runtime: program cache, buffer pool, enqueueing with events, profiling (devices.py chooses the device).

One OpenCLRuntime per device, shared by every graph that runs on it (contexts and compiled programs are
expensive: PoCL takes a good part of a second or more per program). Layers talk to it in two moments:

  at build     rt.kernel("activation.cl", "relu", ["-DACT=1"])   compiled once, Kernel object kept
               rt.upload(weights)                                a device copy of a weight, made once
  at forward   q.run(kernel, global_size, local_size, *args)      enqueue without waiting on the host

`q` is an Enqueuer (enqueuer.py): it knows which operator is running, hands each kernel the events it must
wait for (levelized schedule) and keeps every kernel's event for profiling.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import re
from pathlib import Path

import numpy as np

from kuiper.core.errors import BackendError, KernelBuildError
from kuiper.opencl import binaries
from kuiper.core.shipped import shipped
from kuiper.opencl.devices import across_bus, build_program, half_probe, is_cpu, select_device, target_features
from kuiper.opencl.pinned import PinnedUploads
from kuiper.core.tensor import Tensor, normalize_shape

CL_DIR = shipped("cl")
# how float32 tensors and weights are stored on the device; kernels compute in float either way (cl/store.h).
# "tf32" stores float, and its products on tensor cores take TF32 inputs (cl/gemm_mma.cl): fp32 elsewhere.
PRECISIONS = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "tf32": np.dtype(np.float32)}
# the compiler options that say so to every program
DEFINES = {"fp32": (), "fp16": ("-DKUIPER_HALF",), "tf32": ("-DKUIPER_TF32",)}
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


#: on CPUs, a kernel that walks rows (cl/copy.cl, cl/expression.cl) gives each work-item runs of at most this
#: many elements: long enough to pay for finding the row, short enough to share a long row between cores
ROW_SPAN = 4096


def round_up(n: int, multiple: int) -> int:
    """n rounded up to a multiple: global sizes stay divisible by any power-of-two local size the driver
    picks, and kernels bounds-check the extra work-items."""
    return max(multiple, -(-int(n) // multiple) * multiple)


def _cl():
    import pyopencl

    return pyopencl


# ---- the runtime ------------------------------------------------------------------------------------
class OpenCLRuntime:
    """A context and queues on one device, with the program/kernel cache and the buffer pool.

    `precision` says how float32 tensors and weights are stored on the device: "fp32", or "fp16" (half the
    bytes; kernels still compute in float), or "tf32" (float, multiplied on tensor cores as TF32 where the
    device has them: see PRECISIONS). A runtime is fp32; `at_precision` gives a view of it that stores
    at another precision and shares everything else."""

    precision = "fp32"
    storage = PRECISIONS["fp32"]
    defines = ()  # compiler options every program gets: how cl/store.h stores floats

    def __init__(self, device):
        cl = _cl()
        self.device = device
        self._shared = {"is_cpu": is_cpu(device)}  # with the precision views (at_precision)
        self.context = cl.Context([device])
        profiling = cl.command_queue_properties.PROFILING_ENABLE
        self.queue = cl.CommandQueue(self.context, properties=profiling)
        ooo = cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
        self.out_of_order = bool(device.queue_properties & ooo)
        self._ooo_queue = None
        self._programs = {}
        self._arg_types = {}  # id(program) -> {kernel: argument type names} for programs made from kept binaries
        self._kernels = {}
        self._kernel_types = {}  # kernel -> (its program, name, arguments' scalar types) (kernel_copy)
        self._views = {"fp32": self}
        self.pool = BufferPool(self)
        self.scratch = {}  # role -> the Scratch that every operator takes for it (Enqueuer.scratch)
        self.pinned = PinnedUploads(self) if across_bus(device) else None  # large uploads' staging (pinned.py)

    @property
    def is_cpu(self) -> bool:
        """Whether the device is a CPU (layers launch differently there); shared with the precision views."""
        return self._shared["is_cpu"]

    @is_cpu.setter
    def is_cpu(self, value: bool) -> None:
        self._shared["is_cpu"] = value

    @property
    def target_features(self) -> frozenset:
        """What the device's kernel compiler targets, by its own predefined macros: {"avx2", "avx512f"} and the
        like, empty where it does not say (devices.target_features)."""
        return target_features(self.device)

    @property
    def programs_built(self) -> int:
        """Programs compiled so far (every one is kept)."""
        return len(self._programs)

    def at_precision(self, precision: str) -> "OpenCLRuntime":
        """This runtime storing floats at `precision` (one of PRECISIONS): one view per precision, sharing the
        context, queues, program cache and buffer pool. Half storage goes through vload_half/vstore_half, core
        OpenCL that needs no cl_khr_fp16; a device whose driver gets them wrong is refused here."""
        view = self._views.get(precision)
        if view is None:
            if precision not in PRECISIONS:
                raise BackendError(f"unknown precision {precision!r} (available: {', '.join(PRECISIONS)})")
            self.ooo_queue  # made now, so that the views share it
            view = copy.copy(self)
            view.precision, view.storage, view.defines = precision, PRECISIONS[precision], DEFINES[precision]
            failure = half_probe(self.context, self.queue) if view.storage == np.float16 else None
            if failure:
                raise BackendError(f"{self.device.name.strip()}: cannot store tensors as fp16 ({failure}); "
                                   f"use precision fp32")
            self._views[precision] = view
        return view

    def stored(self, dtype) -> np.dtype:
        """The dtype a tensor of `dtype` has on the device: float32 is stored at this runtime's precision."""
        dtype = np.dtype(dtype)
        return self.storage if dtype == np.float32 else dtype

    def computed(self, dtype) -> np.dtype:
        """The dtype the graph computes a tensor stored as `dtype` in: float32 for what is stored as fp16."""
        dtype = np.dtype(dtype)
        return np.dtype(np.float32) if dtype == self.storage else dtype

    def loaded(self, array: np.ndarray) -> np.ndarray:
        """A downloaded array in the dtype the graph computes in."""
        return array.astype(self.computed(array.dtype), copy=False)

    @property
    def ooo_queue(self):
        """An out-of-order queue for the levelized schedule (the in-order queue where unsupported)."""
        if self._ooo_queue is None:
            cl = _cl()
            if self.out_of_order:
                props = cl.command_queue_properties
                self._ooo_queue = cl.CommandQueue(
                    self.context, properties=props.PROFILING_ENABLE | props.OUT_OF_ORDER_EXEC_MODE_ENABLE)
            else:
                self._ooo_queue = self.queue
        return self._ooo_queue

    # ---- programs and kernels -------------------------------------------------------------------------
    def program(self, file, options=()):
        """The built program for cl/<file> (or an absolute path) with these options, from the cache when
        the source and the headers it includes are unchanged."""
        options = (*self.defines, *options)
        path = _kernel_path(file)
        source, digest = _source_and_hash(path)
        file = str(file)
        key = (file, " ".join(options), digest)
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = self._build(path, file, source, digest, options)
        return program

    def _build(self, path: Path, file: str, source: str, digest: str, options: tuple):
        """The program built from source, or from the binary kept for a driver that keeps none (binaries.py)."""
        cl = _cl()
        # kernel-arg-info lets `kernel` read each argument's C type (see _arg_type_names)
        full_options = (*options, "-cl-kernel-arg-info", "-I", str(path.parent), "-I", str(CL_DIR))
        where = binaries.folder(self.device)
        entry = binaries.key(self.device, full_options, digest) if where else None
        loaded = binaries.load(where, entry, self.context, full_options) if where else None
        if loaded is not None:
            program, self._arg_types[id(program)] = loaded
            return program
        try:
            program = build_program(self.context, source, list(full_options))
        except cl.RuntimeError as e:
            log = _build_log(e)
            raise KernelBuildError(
                f"{path if Path(file).is_absolute() else 'cl/' + file} failed to build with options {' '.join(options) or '(none)'}:\n{log}",
                file=file, options=" ".join(options), log=log,
            ) from None
        if where:
            binaries.save(where, entry, program, {k.function_name: _arg_type_names(k, k.function_name)
                                                   for k in program.all_kernels()})
        return program

    def kernel(self, file: str, name: str, options=()):
        """A Kernel object, made once per (file, options, name): pyopencl's `program.name` makes a new one
        on every access, which is slow and drops the arguments set on the old one.

        Its scalar arguments' types are declared from the kernel's own signature, so launches pass plain
        Python ints and floats, which pyopencl packs much faster than numpy scalars."""
        program = self.program(file, options)
        key = (id(program), name)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = getattr(program, name)
            # a program made from a kept binary may carry no argument info: the names kept with it stand in
            names = self._arg_types.get(id(program), {}).get(name) or _arg_type_names(kernel, name)
            types = _scalar_types(names)
            kernel.set_scalar_arg_dtypes(types)
            self._kernels[key] = kernel  # only once it is fully set up: a failure above is not remembered
            self._kernel_types[kernel] = (kernel.program, kernel.function_name, types)
        return kernel

    def kernel_copy(self, kernel, args: tuple):
        """Another Kernel object for the function of `kernel` (one of kernel()'s), `args` set on it for good:
        kernel() hands every caller the same object. Its scalars are converted here to the types the function
        declares, rather than declared on the copy: pyopencl would compile an argument packer for each copy,
        which costs as much again as the driver's clCreateKernel."""
        program, name, types = self._kernel_types[kernel]
        copy = _cl().Kernel(program, name)
        copy.set_args(*(np.dtype(t).type(a) if t is not None and isinstance(a, (int, float)) else a  # arrays: bytes
                        for a, t in zip(args, types)))
        return copy

    def source_hash(self, file) -> str:
        """The hash of cl/<file> (or an absolute path) and of the headers it includes: what the program cache
        keys on, and what a tuning measurement (kuiper/opencl/tuning.py) stays valid for."""
        return _source_and_hash(_kernel_path(file))[1]

    # ---- memory --------------------------------------------------------------------------------------
    def upload(self, array: np.ndarray):
        """A read-only device copy of a host array (weights: done once at build), float32 at the precision."""
        cl = _cl()
        # contiguous and aligned, as the driver expects; past half's range a constant is stored as ±inf, as any
        # result is (a mask's finfo.min becomes -inf)
        with np.errstate(over="ignore"):
            array = np.require(array, dtype=self.stored(array.dtype), requirements="CA")
        if not array.nbytes:  # nothing to copy; OpenCL buffers cannot be empty
            return self.allocate(4)
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return cl.Buffer(self.context, flags, hostbuf=array)

    def allocate(self, nbytes: int):
        cl = _cl()
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=max(int(nbytes), 4))

    def max_local_size(self) -> int:
        return self.device.max_work_group_size


def _kernel_path(file) -> Path:
    return Path(file) if Path(file).is_absolute() else CL_DIR / file


def _source_and_hash(path: Path) -> tuple:
    """The source of a kernel file and a hash over it and every header it includes, directly or through
    another header (so an edit to any of them rebuilds)."""
    if not path.exists():
        raise KernelBuildError(f"kernel file not found: {path}", file=str(path), options="", log="")
    source = path.read_text()
    digest = hashlib.sha256(source.encode())
    for header_path in sorted(_headers(path, source, set())):
        digest.update(header_path.read_bytes())
    return source, digest.hexdigest()


def _headers(path: Path, source: str, found: set) -> set:
    """`found` with the existing headers `source` (the text of `path`) includes, and theirs in turn; each is
    looked up beside the file that names it, then in cl/."""
    for header in _INCLUDE.findall(source):
        header_path = path.parent / header if (path.parent / header).exists() else CL_DIR / header
        if header_path.exists() and header_path not in found:
            found.add(header_path)
            _headers(header_path, header_path.read_text(), found)
    return found


def _arg_type_names(kernel, name: str) -> list:
    """The C type name of each argument of a kernel, from its arg info (the program built with
    -cl-kernel-arg-info)."""
    cl = _cl()
    count = kernel.get_info(cl.kernel_info.NUM_ARGS)
    try:
        return [kernel.get_arg_info(i, cl.kernel_arg_info.TYPE_NAME).strip() for i in range(count)]
    except cl.Error as e:
        raise BackendError(f"kernel {name}: the OpenCL driver gives no argument info ({e})") from None


def _scalar_types(names: list) -> list:
    """One numpy dtype per argument type name: pyopencl.cltypes names a dtype for every OpenCL C scalar and
    vector type (int, float, int8, ...); pointers get None (passed as given)."""
    from pyopencl import cltypes

    return [None if name.endswith("*") else getattr(cltypes, name, None) for name in names]


def _build_log(error) -> str:
    """The compiler's messages from a failed build (pyopencl puts them in the error text)."""
    return str(error).strip()


_RUNTIMES: dict = {}


def get_runtime(spec: str | None = None) -> OpenCLRuntime:
    """The shared runtime for the selected device (created on first use)."""
    device = select_device(spec)
    key = (device.platform.name, device.name, device.int_ptr)
    runtime = _RUNTIMES.get(key)
    if runtime is None:
        runtime = _RUNTIMES[key] = OpenCLRuntime(device)
    return runtime


# ---- device tensors -----------------------------------------------------------------------------------
class DeviceTensor(Tensor):
    """A tensor whose elements live in a device buffer (offset 0). `numpy()` downloads them."""

    __slots__ = ("buffer", "_shape", "_dtype", "_size", "runtime")

    def __init__(self, runtime: OpenCLRuntime, buffer, shape: tuple, dtype=np.float32):
        self.runtime = runtime
        self.buffer = buffer
        self._shape = tuple(shape)
        self._dtype = np.dtype(dtype)
        self._size = math.prod(self._shape)  # kept: layers ask for it on every launch

    @property
    def data(self):
        raise AttributeError("a DeviceTensor has no host array: call numpy() to download it")

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    def numpy(self, rows: tuple | None = None) -> np.ndarray:
        """The tensor downloaded; with rows=(first, count), those rows alone (every axis but the last folded), the
        others of the array left unwritten."""
        out = np.empty(self._shape, dtype=self._dtype)
        if not out.size:
            return out
        if rows is None:
            _cl().enqueue_copy(self.runtime.queue, out, self.buffer, is_blocking=True)
            return out
        first, count = rows
        width = self._shape[-1] if self._shape else 1
        if count:
            _cl().enqueue_copy(self.runtime.queue, out.reshape(-1, width)[first:first + count], self.buffer,
                               src_offset=first * width * self._dtype.itemsize, is_blocking=True)
        return out

    def reshape(self, *shape) -> "DeviceTensor":
        """The same buffer under a new shape (no copy, no kernel)."""
        target = list(normalize_shape(shape))
        if -1 in target:
            known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
            target[target.index(-1)] = self.size // known if known else 0
        if int(np.prod(target, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape {self._shape} to {tuple(normalize_shape(shape))}")
        return DeviceTensor(self.runtime, self.buffer, tuple(target), self._dtype)

    def __repr__(self):
        return f"DeviceTensor(shape={self._shape}, dtype={self._dtype})"


# ---- the buffer pool ----------------------------------------------------------------------------------
class Scratch:
    """A device buffer that grows to the largest size asked of it: allocated when a forward first needs it,
    and again only when a larger input needs more."""

    def __init__(self, rt):
        self.rt = rt
        self.buffer = None
        self.nbytes = 0

    def fit(self, nbytes: int):
        """`buffer`, made at least nbytes large."""
        if nbytes > self.nbytes:
            self.nbytes = nbytes
            self.buffer = self.rt.allocate(nbytes)
        return self.buffer


class BufferPool:
    """Device buffers recycled by size: `take` gives the smallest free buffer that is large enough (best
    fit), `give` returns it. Graph plans take their slots here and give them back when dropped."""

    def __init__(self, runtime: OpenCLRuntime):
        self.runtime = runtime
        self._free = []  # sorted list of (size, serial, buffer)
        self._serial = 0
        self.allocated_bytes = 0
        self.allocations = 0

    def take(self, nbytes: int):
        nbytes = max(int(nbytes), 4)
        for i, (size, _, buffer) in enumerate(self._free):
            if size >= nbytes:
                del self._free[i]
                return buffer
        self.allocations += 1
        self.allocated_bytes += nbytes
        return self.runtime.allocate(nbytes)

    def give(self, buffer) -> None:
        self._serial += 1
        self._free.append((buffer.size, self._serial, buffer))
        self._free.sort(key=lambda entry: entry[:2])

    def slots(self, assignment) -> list:
        """One buffer per slot of a liveness assignment."""
        return [self.take(size) for size in assignment.slot_sizes]
