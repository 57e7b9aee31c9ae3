"""OpenCL devices: the probe, the choice among working devices only, the errors that say why and what to
install, kuiper devices, the pip Intel runtime made visible, and kernels that need no pyopencl binary cache."""

import os
import re
import subprocess
import sys
from importlib import metadata
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import OPENCL_DEVICES, ROOT
from kuiper import BackendError, opencl
from kuiper.app import cli
from kuiper.core.cpuinfo import cpu_flags
from kuiper.opencl import binaries, devices, runtime

# a kernel every compiler rejects: what the PoCL wheel's "unknown target CPU 'generic'" does to every build
BROKEN_SOURCE = "__kernel void probe(__global float* x) { x[0] = no_such_name; }"


def working_devices() -> list:
    """all_devices() entries of the devices the conftest survey found usable: those whose compiler reads the
    probe's source, so that a broken source is what fails on them (a driver that cannot build for this CPU at
    all fails before reading it, with its own error)."""
    working = {tuple(map(int, spec.split(":"))) for spec in OPENCL_DEVICES}
    return [entry for entry in devices.all_devices() if entry[:2] in working]


@pytest.fixture
def every_build_fails(monkeypatch):
    """Only the usable devices are listed, and the probe's kernel fails to compile on each of them, as all
    kernels do under a driver that cannot build for this CPU; the probe results of this process are forgotten
    before and after."""
    listed = working_devices()
    monkeypatch.setattr(devices, "all_devices", lambda: listed)
    monkeypatch.setattr(devices, "_PROBES", {})
    monkeypatch.setattr(devices, "PROBE_SOURCE", BROKEN_SOURCE)
    return listed


def test_a_usable_device_passes_the_probe_and_is_listed(cl_runtime):
    assert devices.probe(cl_runtime.device) is None
    assert cl_runtime.device.int_ptr in {dev.int_ptr for _, _, _, dev in devices.usable_devices()}


def test_a_cpu_compiler_targets_only_instruction_sets_this_cpu_has(cl_runtime):
    """What the kernel compiler says it targets (its predefined macros) is among what Linux lists for this CPU:
    code for more would not run here."""
    features = devices.target_features(cl_runtime.device)
    assert features <= set(devices.TARGET_MACROS)
    flags = cpu_flags()
    if cl_runtime.is_cpu and "avx" in flags:  # an x86 Linux machine
        assert features - {"neon"} <= flags, (features, cl_runtime.device.name)


def test_the_default_is_the_first_usable_device_gpus_then_cpus(cl_runtime):
    usable = devices.usable_devices()
    assert devices.select_device().int_ptr == usable[0][3].int_ptr
    kinds = [0 if devices.is_gpu(dev) else 1 if devices.is_cpu(dev) else 2 for _, _, _, dev in usable]
    assert kinds == sorted(kinds)


def test_a_pocl_that_leaves_out_the_cpus_avx512_comes_after_intels_runtime(monkeypatch):
    """by_preference: GPUs first; among CPUs PoCL, then Intel's runtime, then a PoCL whose compiler targets less
    than the CPU has (the PoCL wheel on a Zen 4). On a CPU without AVX-512 every PoCL keeps its place."""
    import pyopencl as cl

    def entry(index, platform, kind, targets):
        return index, 0, SimpleNamespace(name=platform), SimpleNamespace(type=kind, targets=frozenset(targets))

    wheel = entry(0, "Portable Computing Language", cl.device_type.CPU, {"avx2"})
    intel = entry(1, "Intel(R) OpenCL", cl.device_type.CPU, ())
    debian = entry(2, "Portable Computing Language", cl.device_type.CPU, {"avx2", "avx512f"})
    nvidia = entry(3, "NVIDIA CUDA", cl.device_type.GPU, ())
    monkeypatch.setattr(devices, "target_features", lambda device: device.targets)
    for flags, order in ((("avx2", "avx512f"), [3, 2, 1, 0]), (("avx2",), [3, 0, 2, 1])):
        monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset(flags))
        assert [e[0] for e in devices.by_preference([wheel, intel, debian, nvidia])] == order, flags


def test_the_probe_runs_once_per_process_and_device(cl_runtime, monkeypatch):
    calls = []
    monkeypatch.setattr(devices, "_PROBES", {})
    monkeypatch.setattr(devices, "_probe", lambda device: calls.append(device) or None)
    devices.probe(cl_runtime.device)
    devices.probe(cl_runtime.device)
    assert len(calls) == 1


@pytest.mark.skipif(not OPENCL_DEVICES, reason="needs a platform whose compiler can be asked to fail")
def test_a_failing_device_is_refused_with_the_drivers_error_and_a_remedy(every_build_fails):
    p, d, _, device = every_build_fails[0]
    reason = devices.probe(device)
    assert reason is not None and "no_such_name" in reason and "\n" not in reason
    with pytest.raises(BackendError) as info:
        devices.select_device(f"{p}:{d}")
    message = str(info.value)
    assert f"{p}:{d} {device.name.strip()}" in message and "does not work" in message
    assert "no_such_name" in message and ("pip install 'kuiper[intel]'" in message or "driver" in message)
    assert "\n" not in message


@pytest.mark.skipif(not OPENCL_DEVICES, reason="needs a platform whose compiler can be asked to fail")
def test_no_working_device_lists_each_failure_and_the_remedies(every_build_fails):
    with pytest.raises(BackendError) as info:
        devices.select_device()
    message = str(info.value)
    assert message.startswith("no working OpenCL device")
    for p, d, _, device in every_build_fails:
        assert f"{p}:{d} {device.name.strip()}" in message
    assert message.count("no_such_name") == len(every_build_fails)


@pytest.mark.skipif(not OPENCL_DEVICES, reason="needs a platform whose compiler can be asked to fail")
def test_kuiper_devices_says_which_devices_are_usable_and_why_not(every_build_fails, capsys):
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert out.count("NOT usable: error:") == len(every_build_fails) and "no usable device" in out
    assert "compiles for" not in out  # a compiler that built nothing has said nothing of its target


def test_kuiper_devices_marks_the_chosen_usable_device(cl_runtime, capsys):
    assert cli.main(["devices"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marked = [line for line in lines if re.match(r"\* \d+:\d+ ", line)]
    assert len(marked) == 1 and "/ usable /" in marked[0]
    assert devices.select_device().name.strip() in marked[0]


def test_the_one_line_reason_is_the_compilers_error_line():
    log = "clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device>:\n\n" \
          "error: unknown target CPU 'generic'\nnote: valid target CPU values are: ...\n"
    assert devices.one_line(RuntimeError(log)) == "error: unknown target CPU 'generic'"
    assert devices.one_line(RuntimeError("clCreateContext failed: OUT_OF_HOST_MEMORY")) == \
        "clCreateContext failed: OUT_OF_HOST_MEMORY"


@pytest.mark.filterwarnings("ignore::pyopencl.RepeatedKernelRetrieval")  # the failed set-up took one
def test_a_kernel_whose_setup_failed_is_not_kept(cl_runtime, monkeypatch, tmp_path):
    source = tmp_path / "twice.cl"
    source.write_text("__kernel void twice(__global float* y, const float a) { y[get_global_id(0)] *= a; }\n")

    def no_arg_info(kernel, name):
        raise BackendError(f"kernel {name}: the OpenCL driver gives no argument info")

    with monkeypatch.context() as patch:
        patch.setattr(runtime, "_arg_type_names", no_arg_info)
        with pytest.raises(BackendError, match="no argument info"):
            cl_runtime.kernel(source, "twice")
    kernel = cl_runtime.kernel(source, "twice")  # set up afresh, with its argument types
    buffer = cl_runtime.upload(np.ones(4, np.float32))
    kernel(cl_runtime.queue, (4,), None, buffer, 2.5)  # a plain float: the declared type packs it
    out = np.empty(4, np.float32)
    runtime._cl().enqueue_copy(cl_runtime.queue, out, buffer, is_blocking=True)
    np.testing.assert_array_equal(out, 2.5)


def test_kuiper_keeps_the_builds_of_a_driver_that_keeps_none(cl_runtime, tmp_path, monkeypatch):
    """Intel's CPU runtime builds every program again in each process; kuiper keeps its binaries (with the
    kernels' argument types) and a fresh runtime makes the program from them. Other drivers keep their own."""
    monkeypatch.setenv("KUIPER_PROGRAM_CACHE", str(tmp_path / "programs"))
    source = tmp_path / "scale.cl"
    source.write_text("__kernel void scale(__global float* y, const float a) { y[get_global_id(0)] *= a; }\n")

    def scaled(rt):
        buffer = rt.upload(np.ones(4, np.float32))
        rt.kernel(source, "scale")(rt.queue, (4,), None, buffer, 2.5)  # a plain float: the kept type packs it
        return opencl.DeviceTensor(rt, buffer, (4,)).numpy()

    np.testing.assert_array_equal(scaled(cl_runtime), 2.5)
    kept = sorted((tmp_path / "programs").glob("*.bin")) if (tmp_path / "programs").exists() else []
    assert len(kept) == (cl_runtime.device.platform.name in binaries.UNCACHED_PLATFORMS)
    if not kept:
        return
    fresh = runtime.OpenCLRuntime(cl_runtime.device)
    np.testing.assert_array_equal(scaled(fresh), 2.5)
    assert len(fresh._arg_types) == 1  # made from the kept binary, not compiled
    kept[0].write_bytes(b"not a program")  # an entry that will not load is built from source and written again
    damaged = runtime.OpenCLRuntime(cl_runtime.device)
    np.testing.assert_array_equal(scaled(damaged), 2.5)
    assert not damaged._arg_types and kept[0].read_bytes() != b"not a program"


SECOND_PROCESS = """
import numpy as np, kuiper
from kuiper.opencl import get_runtime
rt = get_runtime({device!r})
relu = rt.kernel("activation.cl", "activation", ["-DACT=act_relu"])
x = np.array([-1, 2, -3, 4], np.float32)
out = rt.upload(np.zeros(4, np.float32))
relu(rt.queue, (4,), None, out, rt.upload(x), 4, 0.0, 0.0)
y = np.empty(4, np.float32)
import pyopencl; pyopencl.enqueue_copy(rt.queue, y, out, is_blocking=True)
assert (y == np.maximum(x, 0)).all(), y
"""


def test_kernels_build_and_run_the_same_in_a_second_process(cl_runtime, tmp_path):
    # pyopencl's binary cache (shared by processes) hands out programs without argument info on some drivers
    # (Intel's CPU runtime): the second process is the one that used to fail
    device = devices.spec_of(cl_runtime.device)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))  # a cache of this test's own, empty at first
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", SECOND_PROCESS.format(device=device)], cwd=ROOT, env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def _intel_installed() -> bool:
    try:
        metadata.distribution(devices.INTEL_CPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return False
    return True


SHOW_VENDORS = """
import os
from kuiper.opencl import devices
print([p.name for p in devices.platforms()])
print(os.environ.get("OCL_ICD_VENDORS"))
"""


@pytest.mark.skipif(not _intel_installed(), reason="Intel's CPU runtime (the intel extra) is not installed")
def test_the_pip_intel_runtime_is_made_visible_before_the_first_query(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-c", SHOW_VENDORS], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    names, folder = result.stdout.splitlines()
    assert "Intel(R) OpenCL" in names and folder.startswith(str(tmp_path))
    icd = (tmp_path / "kuiper" / "icd").glob("*/pip-intel-cpu.icd")
    (library,) = [path.read_text().strip() for path in icd]
    assert library.endswith(devices.INTEL_CPU_LIBRARY) and os.path.exists(library)


KEEP_VENDORS = """
import os
from kuiper.opencl import devices
devices.expose_pip_drivers()
print(os.environ.get("OCL_ICD_VENDORS"))
"""


def test_an_ocl_icd_vendors_set_by_the_user_is_kept(tmp_path):
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-c", KEEP_VENDORS], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path) and not (tmp_path / "cache" / "kuiper").exists()


def test_a_kept_build_is_keyed_by_the_drivers_settings(monkeypatch):
    """Intel's runtime compiles for CL_CONFIG_CPU_TARGET_ARCH where set: a build kept under another target must
    not be loaded (it was, and ran as AVX code after the variable asked for AVX-512)."""
    intel = SimpleNamespace(platform=SimpleNamespace(name="Intel(R) OpenCL"), name="cpu", driver_version="1")
    monkeypatch.delenv("CL_CONFIG_CPU_TARGET_ARCH", raising=False)
    plain = binaries.key(intel, ("-DX",), "digest")
    monkeypatch.setenv("KUIPER_UNRELATED", "1")
    assert binaries.key(intel, ("-DX",), "digest") == plain
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "core-avx2")
    assert binaries.key(intel, ("-DX",), "digest") != plain
    assert devices.configured_target(intel) == {"avx2"}
    pocl = SimpleNamespace(platform=SimpleNamespace(name="Portable Computing Language"))
    assert devices.configured_target(pocl) is None  # the variable is Intel's
