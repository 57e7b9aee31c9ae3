"""The OpenCL runtime: device choice, program cache, build errors, the buffer pool, no-platform handling."""

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

import kuiper
from conftest import ROOT, model_cases, model_paths
from kuiper import BackendError, KernelBuildError
from kuiper import opencl
from kuiper.opencl.devices import spec_of

pytestmark = pytest.mark.filterwarnings("ignore::kuiper.KuiperWarning")


def test_device_choice_by_index_and_by_name(cl_runtime):
    device = cl_runtime.device
    assert opencl.select_device(spec_of(device)).int_ptr == device.int_ptr
    assert opencl.select_device(device.name).int_ptr == device.int_ptr  # an exact name wins over substrings
    word = device.name.split()[-1]
    assert word.lower() in opencl.select_device(word).name.lower()
    with pytest.raises(BackendError, match="available: 0:0"):
        opencl.select_device("no-such-device-anywhere")
    with pytest.raises(BackendError, match="no OpenCL device '9:9'"):
        opencl.select_device("9:9")


def test_environment_variable_picks_the_device(cl_runtime, monkeypatch):
    monkeypatch.setenv("KUIPER_CL_DEVICE", spec_of(cl_runtime.device))
    assert opencl.select_device().int_ptr == cl_runtime.device.int_ptr


def test_program_cache_builds_once_and_rebuilds_after_an_edit(cl_runtime, tmp_path):
    source = tmp_path / "scale.cl"
    source.write_text("__kernel void scale(__global float* y, const float a) { y[get_global_id(0)] *= a; }\n")
    built = cl_runtime.programs_built
    k1 = cl_runtime.kernel(source, "scale", ["-DUNUSED=1"])
    k2 = cl_runtime.kernel(source, "scale", ["-DUNUSED=1"])
    assert k1 is k2 and cl_runtime.programs_built == built + 1
    cl_runtime.kernel(source, "scale", ["-DUNUSED=2"])  # other options: another program
    assert cl_runtime.programs_built == built + 2
    source.write_text(source.read_text() + "// edited\n")
    cl_runtime.kernel(source, "scale", ["-DUNUSED=1"])
    assert cl_runtime.programs_built == built + 3


def test_an_edit_to_a_header_that_a_header_includes_rebuilds(cl_runtime, tmp_path):
    (tmp_path / "outer.h").write_text('#include "inner.h"\n')
    (tmp_path / "inner.h").write_text("#define FACTOR 2.0f\n")
    source = tmp_path / "nested.cl"
    source.write_text('#include "outer.h"\n'
                      "__kernel void nested(__global float* y) { y[get_global_id(0)] *= FACTOR; }\n")
    hash_before = cl_runtime.source_hash(source)

    def run():
        buf = cl_runtime.upload(np.arange(4, dtype=np.float32))
        cl_runtime.kernel(source, "nested")(cl_runtime.queue, (4,), None, buf)
        return opencl.DeviceTensor(cl_runtime, buf, (4,)).numpy()

    np.testing.assert_array_equal(run(), [0, 2, 4, 6])
    (tmp_path / "inner.h").write_text("#define FACTOR 5.0f\n")
    assert cl_runtime.source_hash(source) != hash_before  # a tuning measurement no longer holds
    np.testing.assert_array_equal(run(), [0, 5, 10, 15])


def test_a_broken_kernel_raises_kernel_build_error_with_the_log(cl_runtime, tmp_path):
    source = tmp_path / "broken.cl"
    source.write_text("__kernel void broken(__global float* y) { y[0] = undefined_name; }\n")
    with pytest.raises(KernelBuildError) as info:
        cl_runtime.kernel(source, "broken", ["-DX=1"])
    assert "broken.cl" in str(info.value) and info.value.options == "-DX=1"
    assert "undefined_name" in info.value.log


def test_a_second_build_compiles_nothing_and_forwards_allocate_nothing(cl_runtime):
    param, bin_ = model_paths("unet_tiny")
    (_, inputs, refs), = [c for c in model_cases("unet_tiny") if c[0] == "b2"]
    device = spec_of(cl_runtime.device)
    first = kuiper.load(param, bin_, backend="opencl", device=device)
    first.forward(*inputs)
    built = first.runtime.programs_built
    second = kuiper.load(param, bin_, backend="opencl", device=device)
    assert second.runtime is first.runtime and second.runtime.programs_built == built
    second.forward(*inputs)
    allocations, allocated = second.runtime.pool.allocations, second.runtime.pool.allocated_bytes
    for _ in range(200):
        outs = second.forward(*inputs)
    assert second.runtime.pool.allocations == allocations
    assert second.runtime.pool.allocated_bytes == allocated
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))


def test_pool_hands_back_the_smallest_buffer_that_fits(cl_runtime):
    pool = opencl.BufferPool(cl_runtime)
    small, big = pool.take(100), pool.take(1000)
    pool.give(big)
    pool.give(small)
    assert pool.take(50) is small
    assert pool.take(500) is big
    assert pool.allocations == 2


@pytest.mark.parametrize("levels", [False, True])
def test_operators_share_the_runtimes_scratch(cl_runtime, levels):
    """One buffer per role for every operator, grown to the largest asked; in the levelized schedule an operator
    that takes it waits for the last one that did, producer or not."""
    q = opencl.Enqueuer(cl_runtime, levels=levels)
    first, second, third = (SimpleNamespace(name=name) for name in ("first", "second", "third"))
    role = f"test {levels}"  # a scratch of its own: the runtime is shared
    q.begin(first, ())
    buffer = q.scratch(role, 4000)
    written = q.write(buffer, np.arange(1000, dtype=np.float32))
    q.begin(second, ())  # no producer: only the scratch orders it after `first`
    assert q.scratch(role, 400) is buffer and q.scratch("other", 400) is not buffer
    if q.levels:
        assert written in q._wait
    q.begin(third, [second])
    assert q.scratch(role, 8000) is cl_runtime.scratch[role].buffer is not buffer
    assert cl_runtime.scratch[role].nbytes >= 8000
    q.finish()


@pytest.mark.parametrize("levels", [False, True])
def test_pinned_uploads_land_whole_and_reuse_their_memory(cl_runtime, monkeypatch, levels):
    """Large uploads to a GPU go through page-locked memory in chunks (kuiper/opencl/pinned.py). Here on every
    device, with chunks of 1 KB: arrays that end mid-chunk, one that wraps the staging buffer back to its start
    (once the transfers before have finished) and one larger than it (a new buffer)."""
    monkeypatch.setattr(opencl.pinned, "CHUNK", 1024)
    monkeypatch.setattr(opencl.pinned, "SMALLEST", 256)
    monkeypatch.setattr(cl_runtime, "pinned", opencl.pinned.PinnedUploads(cl_runtime, threads=2))
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (3 * 256 + 5, 10, 700, 2000, 5000)]
    buffers = [cl_runtime.allocate(a.nbytes) for a in arrays]
    q = opencl.Enqueuer(cl_runtime, levels=levels)
    for i, (buffer, array) in enumerate(zip(buffers, arrays)):
        q.begin(SimpleNamespace(name=f"input {i}"), ())
        q.write(buffer, array)
    assert [len(q.events[f"input {i}"]) for i in range(len(arrays))] == [4, 1, 3, 8, 20]  # 10 floats: direct
    assert cl_runtime.pinned._host.nbytes == 32768  # 20000 bytes, rounded up to a power of two
    q.finish()
    for buffer, array in zip(buffers, arrays):
        back = np.empty_like(array)
        cl.enqueue_copy(cl_runtime.queue, back, buffer)
        np.testing.assert_array_equal(back, array)


def test_no_platform_is_a_backend_error_with_a_hint():
    # the ICD loader finds no vendor at all: what a machine without any OpenCL driver sees
    env = dict(os.environ, OCL_ICD_VENDORS=str(ROOT / "no-such-vendors-dir"))
    code = "import kuiper; kuiper.load('models/act_zoo/act_zoo.pnnx.param', backend='opencl')"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "kuiper.core.errors.BackendError: no OpenCL platform found" in result.stderr
    assert "pocl-binary-distribution" in result.stderr
    cli = subprocess.run([sys.executable, "-m", "kuiper", "devices"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert cli.returncode == 1
    assert cli.stderr.startswith("kuiper: error: no OpenCL platform found") and "Traceback" not in cli.stderr
