"""Shared fixtures: where the committed models and their PyTorch references live."""

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
# precision="fp16" (half storage, float arithmetic): what a layer may be off by, relative to its largest output.
# A stored value carries a relative rounding of at most 2^-11 (4.9e-4); inputs, weights and the output are each
# rounded once, and sums of many such terms add up to a few of these.
FP16_RTOL = 5e-3


def load_manifest() -> dict:
    with open(MODELS / "manifest.json") as f:
        return json.load(f)


def model_names() -> list:
    return sorted(load_manifest()["models"])


def model_paths(name: str) -> tuple:
    entry = load_manifest()["models"][name]
    return MODELS / entry["param"], MODELS / entry["bin"]


def model_cases(name: str) -> list:
    """[(case name, [input arrays], [reference output arrays]), ...] saved by tools/export_models.py."""
    entry = load_manifest()["models"][name]
    return [
        (c["name"], [np.load(MODELS / p) for p in c["inputs"]], [np.load(MODELS / p) for p in c["outputs"]])
        for c in entry["cases"]
    ]


@pytest.fixture(scope="session")
def manifest() -> dict:
    return load_manifest()


@pytest.fixture(scope="session", autouse=True)
def tuning_cache_in_tmp(tmp_path_factory):
    """No test reads or writes the user's tuning cache (kuiper/opencl/tuning.py) or kept programs
    (kuiper/opencl/binaries.py), and every graph starts by rule, whatever the environment says: tests of
    measurement ask for it themselves."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("KUIPER_TUNING", raising=False)
        patch.setenv("KUIPER_TUNING_CACHE", str(tmp_path_factory.mktemp("tuning") / "tuning.json"))
        patch.setenv("KUIPER_PROGRAM_CACHE", str(tmp_path_factory.mktemp("programs")))
        yield


@pytest.fixture(scope="session", autouse=True)
def numpy_unless_named():
    """The commands the tests run (`kuiper run`, `detect`, `generate`...) take the numpy backend where they name
    none, as every Python call in the tests names its backend: the OpenCL tests name their devices, and
    tests/runtime/test_auto.py tests the default itself (kuiper/runtime/auto.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUIPER_BACKEND", "numpy")
        yield


def allocated_during(call) -> int:
    """The most bytes that allocations made during call() held at once (numpy reports its arrays to tracemalloc)."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---- OpenCL: every test that takes `cl_runtime` runs once per usable OpenCL device -------------------
def _survey_opencl() -> tuple:
    """(["P:D" of each usable device, the default first], [one line per device: usable, or why not])."""
    try:
        from kuiper.opencl import devices

        listed = devices.by_preference(devices.all_devices())
    except Exception as e:  # no platform at all: the OpenCL tests are skipped, the numpy ones still run
        return [], [str(e).splitlines()[0]]
    usable, lines = [], []
    for p, d, _, device in listed:
        reason = devices.probe(device)
        lines.append(f"{devices.label(p, d, device)}: {reason or 'usable'}")
        if reason is None:
            usable.append(f"{p}:{d}")
    return usable, lines


OPENCL_DEVICES, OPENCL_SURVEY = _survey_opencl()
NO_OPENCL = "no usable OpenCL device: " + "; ".join(OPENCL_SURVEY)


def pytest_sessionstart(session):
    """The devices the OpenCL tests run on, and why any other is left out, once at the top (also under -q,
    which hides pytest's own header)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("OpenCL devices: " + ("; ".join(OPENCL_SURVEY) or "none"))


def pytest_collection_modifyitems(config, items):
    """Where no OpenCL device works, the lessons' doctests that use OpenCL skip, saying why."""
    if OPENCL_DEVICES:
        return
    for item in items:
        if isinstance(item, pytest.DoctestItem) and _doctest_uses_opencl(item.path):
            item.add_marker(pytest.mark.skip(reason=NO_OPENCL))


def _doctest_uses_opencl(path) -> bool:
    return any(line.lstrip().startswith(">>>") and "opencl" in line.lower()
               for line in Path(path).read_text().splitlines())


@pytest.fixture(scope="session", params=OPENCL_DEVICES or [pytest.param(None, marks=pytest.mark.skip(NO_OPENCL))])
def cl_runtime(request):
    from kuiper.opencl import get_runtime

    return get_runtime(request.param)


def assert_outputs_close(got, expected, rtol, where=""):
    """Each output has the expected shape and dtype, and is within rtol of it, relative to its largest value."""
    assert len(got) == len(expected), where
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, where
        scale = max(1.0, float(np.abs(e).max())) if e.size else 1.0
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * scale, err_msg=where)


def fits_half(inputs) -> bool:
    """Whether every finite float input is within half's range (65504): beyond it, half storage rounds it to
    infinity, which is what fp16 means and not a kernel's error."""
    limit = float(np.finfo(np.float16).max)
    return all(not np.any(np.abs(x[np.isfinite(x)]) > limit) for x in map(np.asarray, inputs) if x.dtype.kind == "f")


def fp16_twin(rt, inputs=()):
    """The fp16 view of the first device's fp32 runtime, else None: half storage changes no kernel, only how
    tensors are stored, so one device checks it, on inputs half can hold."""
    from kuiper.opencl import get_runtime

    first = get_runtime(OPENCL_DEVICES[0]) if OPENCL_DEVICES else None
    return rt.at_precision("fp16") if rt is first and fits_half(inputs) else None


def on_opencl(layer):
    """The opencl backend's layer for the operator of `layer` (made by make_layer with any backend)."""
    from kuiper.opencl.layer import OpenCLLayer
    from kuiper.opencl.registry import opencl_class

    if isinstance(layer, OpenCLLayer):
        return layer
    cls = opencl_class(layer.op.type)
    assert cls is not None, f"{layer.op.type} has no OpenCL layer (kuiper/opencl/)"
    twin = cls(layer.op)
    twin.check_params_read()
    return twin


def assert_opencl_matches_numpy(layer, rt, *inputs, rtol=1e-4, variant=None):
    """The ncnn-style check: the OpenCL forward of the layer's operator (with `variant`, else the one its rule
    picks) equals the layer's numpy forward on the same inputs; on the first device also with half storage,
    within FP16_RTOL."""
    from kuiper.opencl.layer import runs_on_device

    layer = on_opencl(layer)
    assert runs_on_device(layer), f"{type(layer).__name__} cannot run on OpenCL"
    expected = layer.run_numpy(*inputs)
    assert_outputs_close(layer.run_opencl(rt, *inputs, variant=variant), expected, rtol)
    half = fp16_twin(rt, inputs)
    if half is not None:
        assert_outputs_close(layer.run_opencl(half, *inputs, variant=variant), expected, max(rtol, FP16_RTOL), "fp16")


def assert_every_variant_matches_numpy(layer, rt, *inputs, rtol=1e-4) -> list:
    """The same check for every kernel variant able to run these inputs (kuiper/opencl/tuning.py), not only
    the one the rule picks on this device: a shape measured elsewhere may pick any of them. Returns their names."""
    layer = on_opencl(layer)
    layer.build_opencl(rt)
    names = layer.variants.candidates(tuple(np.shape(x) for x in inputs))
    for name in names:
        assert_opencl_matches_numpy(layer, rt, *inputs, rtol=rtol, variant=name)
    return names


def assert_every_path_matches_reference(type, *inputs, threads=(1, 2, 3), rtol=1e-4, **layer_options) -> list:
    """ncnn's test_layer: the reference layer's numpy forward (kuiper/layers/) is the oracle; the fast CPU layer
    (kuiper/cpu/) in every variant that claims these shapes, at each thread count, and the OpenCL forward on every
    usable device must match it. `layer_options` go to make_layer (params, attrs, input_shapes...). Returns the
    names of the CPU variants checked (["forward_numpy"] for a fast layer without variants; [] without one)."""
    from kuiper import cpu  # noqa: F401  (registers the fast layers)
    from kuiper.cpu import threads as cpu_threads
    from kuiper.cpu.registry import fast_class
    from kuiper.opencl import get_runtime
    from kuiper.opencl.registry import opencl_class
    from kuiper.runtime.backends import make_layer
    from kuiper.core.variants import shape_key

    options = {"input_shapes": [np.shape(x) for x in inputs], **layer_options}
    reference = make_layer(type, **options)
    expected = reference.run_numpy(*inputs)

    checked = []
    if fast_class(type) is not None:
        fast = make_layer(type, backend="numpy", **options)
        shapes = shape_key([np.shape(x) for x in inputs])
        names = [None] if fast.variants is None else fast.variants.candidates(shapes)
        for name in names:
            if name is not None:
                fast.variants.fix(shapes, name)
            for count in threads:
                cpu_threads.set_num_threads(count)
                try:
                    with cpu_threads.active():
                        assert_outputs_close(fast.run_numpy(*inputs), expected, rtol,
                                             f"{type} fast variant {name} on {count} thread(s)")
                finally:
                    cpu_threads.set_num_threads(None)
            checked.append(name or "forward_numpy")
    device = make_layer(type, backend="opencl", **options) if opencl_class(type) is not None else None
    if device is not None and device.supports_opencl:  # else the OpenCL executor runs it on the host
        for spec in OPENCL_DEVICES:
            assert_outputs_close(device.run_opencl(get_runtime(spec), *inputs), expected, rtol,
                                 f"{type} OpenCL on {spec}")
        if OPENCL_DEVICES and fits_half(inputs):
            half = get_runtime(OPENCL_DEVICES[0]).at_precision("fp16")
            assert_outputs_close(device.run_opencl(half, *inputs), expected, max(rtol, FP16_RTOL),
                                 f"{type} OpenCL fp16 on {OPENCL_DEVICES[0]}")
    return checked


def linear_weights(shapes: dict, in_features: int, seed: int, scale: float = 1.0) -> dict:
    """Random weights for write_model: {name: (out_features, has a bias)} -> {"name.weight": ..., "name.bias": ...}."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, (out, bias) in shapes.items():
        arrays[f"{name}.weight"] = rng.standard_normal((out, in_features), dtype=np.float32) * scale
        if bias:
            arrays[f"{name}.bias"] = rng.standard_normal(out, dtype=np.float32)
    return arrays


def assert_forwards_match(graph, expected, rows, in_features: int, seed: int) -> None:
    """graph.forward of random (1, r, in_features) inputs, for each r of `rows`, against expected(x): a list of the
    graph's outputs computed by numpy."""
    rng = np.random.default_rng(seed)
    for r in rows:
        x = rng.standard_normal((1, r, in_features), dtype=np.float32)
        for got, want in zip(graph.forward(x), expected(x)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def write_model(tmp_path, name, text, weights):
    """A .pnnx.param from `text` and its .pnnx.bin holding `weights` ({"op.key": array}), float32."""
    import zipfile

    param = tmp_path / f"{name}.pnnx.param"
    param.write_text(text)
    with zipfile.ZipFile(tmp_path / f"{name}.pnnx.bin", "w") as archive:
        for member, array in weights.items():
            archive.writestr(member, np.asarray(array, np.float32).tobytes())
    return param
