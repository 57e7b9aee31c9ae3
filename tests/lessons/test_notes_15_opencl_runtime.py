"""The claims of lesson 15: the program cache, build errors, the buffer pool, the Enqueuer on both queues,
profiling events and host fallbacks. No time is asserted; event timestamps are only compared for order."""

import warnings
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

import kuiper
from kuiper import BackendError, KernelBuildError, KuiperWarning
from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.registry import register, unregister
from kuiper.opencl import BufferPool, DeviceTensor, Enqueuer, round_up
from lesson_tools import MODELS, check_shell_commands, model_case
from kuiper.opencl.devices import spec_of

UNET = MODELS / "unet_tiny" / "unet_tiny.pnnx.param"


def close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))


@pytest.fixture(scope="module")
def unet(cl_runtime):
    """unet_tiny on this device, one graph per schedule."""
    return {schedule: kuiper.load(UNET, backend="opencl", device=spec_of(cl_runtime.device), schedule=schedule)
            for schedule in ("inorder", "levels")}


def test_program_cache_keys_on_file_options_and_source(cl_runtime, tmp_path):
    rt = cl_runtime
    (tmp_path / "factor.h").write_text("#define FACTOR 2.0f\n")
    source = tmp_path / "twice.cl"
    source.write_text('#include "factor.h"\n'
                      "__kernel void twice(__global float* y, const int n) {\n"
                      "    const int i = get_global_id(0);\n"
                      "    if (i < n) y[i] *= FACTOR * SCALE;\n}\n")
    before = rt.programs_built

    def run(options):
        buf = rt.upload(np.arange(5, dtype=np.float32))
        rt.kernel(source, "twice", options)(rt.queue, (8,), None, buf, np.int32(5))
        return DeviceTensor(rt, buf, (5,)).numpy()

    np.testing.assert_array_equal(run(["-DSCALE=1"]), [0, 2, 4, 6, 8])
    np.testing.assert_array_equal(run(["-DSCALE=1"]), [0, 2, 4, 6, 8])
    assert rt.programs_built == before + 1
    np.testing.assert_array_equal(run(["-DSCALE=3"]), [0, 6, 12, 18, 24])  # other options, other program
    assert rt.programs_built == before + 2
    (tmp_path / "factor.h").write_text("#define FACTOR 10.0f\n")  # an edit in an included header
    np.testing.assert_array_equal(run(["-DSCALE=1"]), [0, 10, 20, 30, 40])
    assert rt.programs_built == before + 3


def test_a_build_error_carries_file_options_and_log(cl_runtime, tmp_path):
    broken = tmp_path / "broken.cl"
    broken.write_text("__kernel void broken(__global float* y) {\n    y[0] = undefined_name;\n}\n")
    before = cl_runtime.programs_built
    with pytest.raises(KernelBuildError) as info:
        cl_runtime.kernel(broken, "broken", ["-DA=1", "-DB=2"])
    error = info.value
    assert isinstance(error, BackendError)
    assert error.options == "-DA=1 -DB=2" and error.file == str(broken)
    assert "undefined_name" in error.log and error.log in str(error)
    assert cl_runtime.programs_built == before  # a failed build is not cached


def test_pool_is_best_fit(cl_runtime):
    pool = BufferPool(cl_runtime)
    sizes = [400, 100, 4000, 1000]
    buffers = [pool.take(n) for n in sizes]
    assert pool.allocations == 4 and pool.allocated_bytes == sum(sizes)
    for b in buffers:
        pool.give(b)
    # each request gets the smallest free buffer that fits, checked against the rule written out
    free = dict(zip(sizes, buffers))
    for request in (90, 950, 101, 5000, 300):
        fitting = [size for size in free if size >= request]
        got = pool.take(request)
        if fitting:
            assert got is free.pop(min(fitting))
        else:
            assert got.size >= request and pool.allocations == 5  # nothing fits: a new buffer
    assert pool.take(3) is not None and pool.allocations == 6  # the 4-byte minimum, newly allocated


def count_calls(monkeypatch, rt, names):
    calls = {name: 0 for name in names}
    for name in names:
        target = rt.pool if name == "take" else rt
        original = getattr(target, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(target, name, counted)
    return calls


def test_a_second_forward_allocates_and_uploads_nothing(cl_runtime, unet, monkeypatch):
    graph = unet["inorder"]
    _, (x,), refs = model_case("unet_tiny", "b2")
    graph.forward(x)  # the first forward may allocate layers' scratch (im2col's column buffer)
    weights = {op.name: op.layer.cl_weight for op in graph.operators if op.type == "nn.Conv2d"}
    calls = count_calls(monkeypatch, cl_runtime, ["upload", "allocate", "take"])
    for _ in range(3):
        outputs = graph.forward(x)
    assert calls == {"upload": 0, "allocate": 0, "take": 0}
    assert all(close(o, r) for o, r in zip(outputs, refs))
    # the weights uploaded at build are still the same buffers, holding each layer's GEMM matrix
    for op in graph.operators:
        if op.type == "nn.Conv2d":
            assert op.layer.cl_weight is weights[op.name]
            w = op.layer.w_gemm
            np.testing.assert_array_equal(DeviceTensor(cl_runtime, weights[op.name], w.shape).numpy(), w)


def test_plan_slots_come_from_the_pool_per_input_shape(cl_runtime, unet):
    graph = unet["inorder"]
    plan = graph.plan_for((1, 3, 64, 40))
    assert plan is graph.plan_for((1, 3, 64, 40)) and len(graph.plans) >= 2
    assert len(plan.slots) == len(plan.assignment.slot_sizes)
    assert all(buffer.size >= size for buffer, size in zip(plan.slots, plan.assignment.slot_sizes))


def two_dependent_operators(rt, levels):
    """relu then sigmoid of its output, as two operators; (Enqueuer, events, result)."""
    relu = rt.kernel("activation.cl", "activation", ["-DACT=act_relu"])
    sigmoid = rt.kernel("activation.cl", "activation", ["-DACT=act_sigmoid"])
    v = np.linspace(-4, 4, 3001, dtype=np.float32)
    n, grid = np.int32(v.size), (round_up(v.size, 256),)
    mid, out = rt.allocate(v.nbytes), rt.allocate(v.nbytes)
    first, second = SimpleNamespace(name="first"), SimpleNamespace(name="second")
    q = Enqueuer(rt, levels=levels)
    q.begin(first, ())
    e1 = q.run(relu, grid, None, mid, rt.upload(v), n, np.float32(0), np.float32(0))
    q.begin(second, [first])
    e2 = q.run(sigmoid, grid, None, out, mid, n, np.float32(0), np.float32(0))
    q.finish()
    expected = 1 / (1 + np.exp(-np.maximum(v.astype(np.float64), 0)))
    return q, (e1, e2), DeviceTensor(rt, out, v.shape).numpy(), expected


@pytest.mark.parametrize("levels", [False, True])
def test_enqueuer_events_and_wait_lists(cl_runtime, levels):
    q, (e1, e2), result, expected = two_dependent_operators(cl_runtime, levels)
    assert q.queue is (cl_runtime.ooo_queue if levels else cl_runtime.queue)
    assert q.levels == (levels and cl_runtime.out_of_order)
    assert q.events == {"first": [e1], "second": [e2]}
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    for e in (e1, e2):
        assert e.command_execution_status == cl.command_execution_status.COMPLETE
    assert e2.profile.start >= e1.profile.end  # the consumer started after its producer ended
    assert q.kernel_seconds("second") == (e2.profile.end - e2.profile.start) * 1e-9
    assert q.kernel_seconds("nobody") == 0


@pytest.mark.parametrize("case", ["b2", "b1_64x40"])
def test_both_schedules_match_pytorch_and_each_other(unet, case):
    _, inputs, refs = model_case("unet_tiny", case)
    inorder, levels = unet["inorder"].forward(*inputs), unet["levels"].forward(*inputs)
    for a, b, r in zip(inorder, levels, refs):
        np.testing.assert_array_equal(a, b)
        assert close(a, r)


def test_profile_has_a_device_time_for_every_layer_in_order(unet):
    graph = unet["levels"]
    _, inputs, _ = model_case("unet_tiny", "b2")
    graph.forward(*inputs, profile=True)
    assert [entry[0].name for entry in graph.last_profile] == [op.name for op in graph.order if op.layer]
    assert all(host >= 0 and device is not None and device > 0 for _, host, device in graph.last_profile)


@pytest.fixture
def softsign():
    @register("lesson14.Softsign")
    class Softsign(ElementwiseLayer):
        def apply(self, x, out):
            np.divide(x, 1 + np.abs(x), out=out)

    yield
    unregister("lesson14.Softsign")


@pytest.mark.parametrize("schedule", ["inorder", "levels"])
def test_a_layer_without_kernels_runs_on_the_host(cl_runtime, softsign, tmp_path, schedule):
    path = tmp_path / "soft.pnnx.param"
    path.write_text("7767517\n5 4\n"
                    "pnnx.Input in0 0 1 x #x=(3,4)f32\n"
                    "nn.ReLU relu 1 1 x r #x=(3,4)f32 #r=(3,4)f32\n"
                    "lesson14.Softsign soft 1 1 r s #r=(3,4)f32 #s=(3,4)f32\n"
                    "nn.Sigmoid sig 1 1 s y #s=(3,4)f32 #y=(3,4)f32\n"
                    "pnnx.Output out0 1 0 y\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device), schedule=schedule)
    assert [w.category for w in caught] == [KuiperWarning] and "soft (lesson14.Softsign)" in str(caught[0].message)
    assert [op.name for op in graph.host_fallbacks] == ["soft"]
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    (y,) = graph.forward(x)
    r = np.maximum(x.astype(np.float64), 0)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-r / (1 + r))), rtol=1e-6)


def test_the_commands_in_the_notes(capsys, cl_runtime):
    outputs = check_shell_commands(15, capsys)
    profile = outputs["kuiper run models/unet_tiny/unet_tiny.pnnx.param --backend opencl --profile"]
    assert "matches the saved PyTorch output" in profile and "device ms" in profile
    assert "time per type" in profile
