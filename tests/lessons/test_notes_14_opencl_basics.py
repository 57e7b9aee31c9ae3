"""The claims of lesson 14: OpenCL objects, a first kernel, work sizes and bounds checks, kuiper's wrappers."""

import re

import numpy as np
import pyopencl as cl
import pytest

import kuiper
from kuiper import opencl
from kuiper.opencl import DeviceTensor, get_runtime, round_up
from kuiper.runtime.backends import make_layer
from lesson_tools import BLOCK, check_shell_commands
from kuiper.opencl.devices import spec_of

SOURCE = """
__kernel void relu(__global float* y, __global const float* x, const int n) {
    const int i = get_global_id(0);
    if (i < n) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}
__kernel void ids(__global int* out) {   // four ints per work-item, at its flat global index
    const int flat = get_global_id(1) * get_global_size(0) + get_global_id(0);
    out[4 * flat + 0] = get_group_id(0);
    out[4 * flat + 1] = get_group_id(1);
    out[4 * flat + 2] = get_local_id(0);
    out[4 * flat + 3] = get_local_id(1);
}
"""
SENTINEL = 12345.0


@pytest.fixture(scope="module")
def program(cl_runtime):
    return cl.Program(cl_runtime.context, SOURCE).build()


def download(rt, buffer, count, dtype=np.float32):
    out = np.empty(count, dtype)
    cl.enqueue_copy(rt.queue, out, buffer)  # blocking, after everything enqueued before it
    return out


@pytest.mark.parametrize("n", [1, 7, 255, 257, 1000])
def test_relu_kernel_stays_inside_its_buffer(cl_runtime, program, n):
    rt, local = cl_runtime, 64
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    spare = round_up(n, local) - n + 16  # room for every extra work-item and then some
    y_buf = rt.upload(np.concatenate([np.full(n, np.nan), np.full(spare, SENTINEL)]).astype(np.float32))
    cl.Kernel(program, "relu")(rt.queue, (round_up(n, local),), (local,), y_buf, rt.upload(x), np.int32(n))
    y = download(rt, y_buf, n + spare)
    np.testing.assert_array_equal(y[:n], np.maximum(x, 0))
    assert (y[n:] == SENTINEL).all()  # nothing written past n: the bounds check held


def test_work_item_numbering_in_two_dimensions(cl_runtime, program):
    rt, (gx, gy), (lx, ly) = cl_runtime, (6, 4), (3, 2)
    buf = rt.allocate(4 * 4 * gx * gy)
    cl.Kernel(program, "ids")(rt.queue, (gx, gy), (lx, ly), buf)
    got = download(rt, buf, 4 * gx * gy, np.int32).reshape(gy, gx, 4)
    y, x = np.mgrid[0:gy, 0:gx]  # the global ids, from the definition
    np.testing.assert_array_equal(got[..., 0], x // lx)
    np.testing.assert_array_equal(got[..., 1], y // ly)
    np.testing.assert_array_equal(got[..., 2], x % lx)
    np.testing.assert_array_equal(got[..., 3], y % ly)


def test_non_uniform_work_groups_are_refused(cl_runtime, program):
    rt = cl_runtime
    buf = rt.allocate(4 * 8)
    with pytest.raises(cl.LogicError, match="INVALID_WORK_GROUP_SIZE"):
        cl.Kernel(program, "relu")(rt.queue, (7,), (4,), buf, buf, np.int32(7))
    rt.queue.finish()


def test_round_up():
    for n in range(0, 600, 7):
        for multiple in (1, 4, 64, 256):
            r = round_up(n, multiple)
            assert r % multiple == 0 and r >= max(n, 1)
            assert r - multiple < max(n, 1)  # the smallest such multiple (and never an empty launch)


def test_one_runtime_per_device_and_kernels_compiled_once(cl_runtime):
    device = cl_runtime.device
    p, d = next((p, d) for p, d, _, dev in opencl.all_devices() if dev == device)
    assert opencl.select_device(f"{p}:{d}") == device
    assert get_runtime(f"{p}:{d}") is cl_runtime and get_runtime(device.name) is cl_runtime
    built = cl_runtime.programs_built
    first = cl_runtime.kernel("activation.cl", "activation", ["-DACT=act_relu"])
    assert cl_runtime.kernel("activation.cl", "activation", ["-DACT=act_relu"]) is first
    assert cl_runtime.programs_built <= built + 1  # +1 only if nothing had asked for it before


def test_device_tensor_downloads_and_has_no_host_array(cl_runtime):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = DeviceTensor(cl_runtime, cl_runtime.upload(x), x.shape)
    assert (t.shape, t.dtype, t.size, t.nbytes) == ((3, 4), np.float32, 12, 48)
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(t.reshape(4, -1).numpy(), x.reshape(4, 3))  # same buffer, new shape
    with pytest.raises(AttributeError, match="numpy()"):
        t.data


def test_kuiper_relu_matches_numpy_and_passes_nan(cl_runtime):
    x = np.random.default_rng(13).standard_normal((2, 3, 17, 19)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    layer = make_layer("nn.ReLU", backend="opencl", input_shapes=(x.shape,))
    (y,) = layer.run_opencl(cl_runtime, x)
    np.testing.assert_array_equal(y, np.where(np.isnan(x), x, np.maximum(x, 0)))
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 0, 1] == np.inf and y[0, 0, 0, 2] == 0


def test_kuipers_activation_kernel_checks_its_bounds_too(cl_runtime):
    rt, n = cl_runtime, 300
    grid = round_up(n, 256)  # what ElementwiseLayer.forward_opencl launches: 212 work-items too many
    x = np.linspace(-1, 1, grid).astype(np.float32)
    y_buf = rt.upload(np.full(grid, SENTINEL, np.float32))
    relu = rt.kernel("activation.cl", "activation", ["-DACT=act_relu"])
    relu(rt.queue, (grid,), None, y_buf, rt.upload(x), np.int32(n), np.float32(0), np.float32(0))
    y = download(rt, y_buf, grid)
    np.testing.assert_array_equal(y[:n], np.maximum(x[:n], 0))
    assert (y[n:] == SENTINEL).all()


def test_a_graph_on_opencl_matches_its_formula(cl_runtime, tmp_path):
    path = tmp_path / "block.pnnx.param"
    path.write_text(BLOCK)
    graph = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device))
    assert graph.runtime is cl_runtime and not graph.host_fallbacks
    x = np.linspace(-3, 3, 18, dtype=np.float32).reshape(1, 2, 3, 3)
    (y,) = graph.forward(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-(2 * np.maximum(x64, 0) + x64))), rtol=1e-6)


def test_the_commands_in_the_notes(capsys, cl_runtime):
    outputs = check_shell_commands(14, capsys)
    listing = outputs["kuiper devices"]
    marked = [line for line in listing.splitlines() if re.match(r"\* \d+:\d+ ", line)]
    assert len(marked) == 1 and opencl.select_device().name.strip() in marked[0]
    assert "matches the saved PyTorch output" in outputs["kuiper run --backend opencl"]
