"""The claims of lesson 13: every CPU variant of the fast Conv2d against the reference layer, with and without a
fused epilogue, on one and two threads; Winograd's tiles against the definition; the rule's choices on ResNet-18;
bands; the fused ResNet-18 against the reference backend and PyTorch. No timing is asserted."""

import math

import numpy as np
import pytest

import kuiper
from kuiper.cpu import conv2d, threads
from kuiper.cpu.registry import fast_class
from kuiper.core.winograd import F2, F4
from kuiper.layers import registry
from kuiper.layers.fused import Epilogue, EpilogueStep
from kuiper.runtime.backends import make_layer
from lesson_tools import RESNET, check_shell_commands, model_case

RNG = np.random.default_rng(13)
IM2COL, POINTWISE, WINOGRAD = {"im2col"}, {"im2col", "pointwise"}, {"im2col", "winograd_f4", "winograd_f2"}

# name: (in, out, kernel, stride, padding, groups, input shape, the variants this geometry offers)
CASES = {
    "3x3 F4 overhanging tiles": (6, 5, 3, 1, 1, 1, (1, 6, 23, 30), WINOGRAD),
    "3x3 F2 batch 3": (4, 7, 3, 1, 1, 1, (3, 4, 12, 12), WINOGRAD),
    "3x3 7x7 image": (8, 8, 3, 1, 1, 1, (1, 8, 7, 7), WINOGRAD),
    "3x3 unpadded unbatched": (5, 6, 3, 1, 0, 1, (5, 14, 19), WINOGRAD),
    "1x1 pointwise": (8, 12, 1, 1, 0, 1, (1, 8, 20, 40), POINTWISE),
    "1x1 stride 2 (a ResNet shortcut)": (8, 16, 1, 2, 0, 1, (2, 8, 14, 14), IM2COL),
    "3x3 stride 2": (6, 8, 3, 2, 1, 1, (1, 6, 29, 31), IM2COL),
    "7x7 stride 2 (the ResNet stem)": (3, 8, 7, 2, 3, 1, (1, 3, 40, 36), IM2COL),
    "3x3 grouped": (6, 9, 3, 1, 1, 3, (1, 6, 12, 30), IM2COL),
}


def layers(cin, cout, k, stride, padding, groups, shape):
    """The fast layer and the reference layer of one operator's parameters and weights."""
    options = dict(input_shapes=(shape,), params=dict(in_channels=cin, out_channels=cout, kernel_size=k, stride=stride,
                                                      padding=padding, groups=groups, bias=True),
                   attrs=dict(weight=RNG.standard_normal((cout, cin // groups, k, k)).astype(np.float32),
                              bias=RNG.standard_normal(cout).astype(np.float32)))
    return make_layer("nn.Conv2d", backend="numpy", **options), make_layer("nn.Conv2d", **options)


@pytest.fixture
def every_split(monkeypatch):
    """Every split worth making, however little work: small shapes then take the bands and channel splits real
    images take. Two threads; back to the default after."""
    monkeypatch.setattr(threads, "MIN_MACS", 1)
    yield
    threads.set_num_threads(None)


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("name", CASES)
def test_every_cpu_variant_matches_the_reference(every_split, name):
    *geometry, shape, offered = CASES[name]
    fast, reference = layers(*geometry, shape)
    assert type(fast) is fast_class("nn.Conv2d") and type(reference) is registry.layer_class("nn.Conv2d")
    assert isinstance(fast, type(reference))
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = reference.run_numpy(x)
    assert set(fast.variants.candidates([shape])) == offered
    for variant in offered:
        assert fast.variants.fix([shape], variant) == variant
        for count in (1, 2):
            threads.set_num_threads(count)
            with threads.active():
                (got,) = fast.run_numpy(x)
            assert got.shape == want.shape
            close(got, want)


@pytest.mark.parametrize("name", ["3x3 F4 overhanging tiles", "3x3 F2 batch 3", "3x3 7x7 image", "1x1 pointwise",
                                  "3x3 stride 2"])
def test_the_epilogue_adds_then_activates_on_every_variant(every_split, name):
    """conv -> add -> relu as the fusion pass hands it over: each part of the output gets the sum and the ReLU."""
    *geometry, shape, offered = CASES[name]
    fast, reference = layers(*geometry, shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    conv = reference.run_numpy(x)[0]
    skip = RNG.standard_normal(conv.shape).astype(np.float32)
    want = np.maximum(conv + skip, 0)
    add = make_layer("pnnx.Expression", params=dict(expr="add(@0,@1)"), input_shapes=[conv.shape] * 2)
    relu = make_layer("nn.ReLU", input_shapes=[conv.shape])
    epilogue = Epilogue([EpilogueStep(add, extra=1), EpilogueStep(relu)], [x, skip])
    for variant in offered:
        fast.variants.fix([x.shape, skip.shape], variant)
        for count in (1, 2):
            threads.set_num_threads(count)
            out = np.full(conv.shape, np.nan, np.float32)
            with threads.active():
                fast.forward_epilogue([x], [out], epilogue)
            close(out, want)


@pytest.mark.parametrize("f", [F2, F4], ids=["F2", "F4"])
def test_one_winograd_tile_is_the_definition(f):
    assert (f.a, f.bt.shape, f.g.shape, f.at.shape) == (f.m + 2, (f.a, f.a), (f.a, 3), (f.m, f.a))
    for _ in range(5):
        d, g = RNG.standard_normal((f.a, f.a)), RNG.standard_normal((3, 3))
        direct = np.array([[np.sum(d[y:y + 3, x:x + 3] * g) for x in range(f.m)] for y in range(f.m)])
        tile = f.at @ ((f.g @ g @ f.g.T) * (f.bt @ d @ f.bt.T)) @ f.at.T
        np.testing.assert_allclose(tile, direct, rtol=1e-10, atol=1e-10)
    # the kernel transform of a whole layer: G g G^T per (out, in) pair, positions first
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    u = f.transform_kernel(w)
    assert u.shape == (f.a * f.a, 3, 2) and u.dtype == np.float32
    for co in range(3):
        for ci in range(2):
            np.testing.assert_allclose(u[:, co, ci].reshape(f.a, f.a), f.g @ w[co, ci] @ f.g.T, rtol=1e-5, atol=1e-6)
    assert f.a ** 2 / (9 * f.m ** 2) == {2: 4 / 9, 4: 1 / 4}[f.m]  # the lesson's share of the multiplications


def lesson_rule(kernel, stride, padding, dilation, groups, out_hw):
    """The rule as the lesson states it, from the operator's parameters and output size."""
    if kernel == (3, 3) and stride == dilation == (1, 1) and groups == 1:
        for m in (4, 2):
            if math.ceil(out_hw[0] / m) * math.ceil(out_hw[1] / m) >= 32:
                return f"winograd_f{m}"
    if kernel == (1, 1) and stride == (1, 1) and padding == (0, 0):
        return "pointwise"
    return "im2col"


@pytest.mark.parametrize("batch", [1, 3])
def test_the_rule_picks_what_the_lesson_says_for_resnet(batch):
    resnet = kuiper.load(RESNET, backend="numpy")
    plan = resnet.plan_for((batch, 3, 224, 224))
    by_size = {}
    convolutions = [op for op in resnet.order if op.type.startswith("nn.Conv2d")]
    assert len(convolutions) == 20
    for op in convolutions:
        conv = op.absorbed[0] if op.absorbed else op  # the file's convolution, with its parameters
        params = {key: tuple(conv.params[key].value) for key in ("kernel_size", "stride", "padding", "dilation")}
        out_hw = plan.shapes[op.output_operand.name][-2:]
        want = lesson_rule(params["kernel_size"], params["stride"], params["padding"], params["dilation"],
                           conv.params["groups"].value, out_hw)
        assert plan.variants[op.name] == want, op.name
        if params["kernel_size"] == (3, 3) and params["stride"] == (1, 1):
            by_size.setdefault(out_hw[0], set()).add(want)
    # the lesson's summary: F(4x4) at 56 and 28, F(2x2) at 14, im2col at 7
    assert by_size == {56: {"winograd_f4"}, 28: {"winograd_f4"}, 14: {"winograd_f2"}, 7: {"im2col"}}
    assert plan.variants["convbn2d_0"] == "im2col" and conv2d.WINOGRAD_MIN_TILES == 32


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("items, rows, max_rows", [(1, 14, 100), (1, 7, 100), (3, 7, 100), (1, 112, 63), (2, 57, 5)])
def test_bands_cover_every_row_once(count, items, rows, max_rows):
    threads.set_num_threads(count)
    try:
        bands = threads.bands(items, rows, max_rows, rows, 10**9)
    finally:
        threads.set_num_threads(None)
    covered = [(item, row) for item, top, height in bands for row in range(top, top + height)]
    assert sorted(covered) == [(item, row) for item in range(items) for row in range(rows)]
    heights = [height for _, _, height in bands]
    assert max(heights) <= max_rows and max(heights) - min(heights) <= 1


def test_parallel_gives_each_thread_one_slice():
    threads.set_num_threads(2)
    try:
        seen = []
        threads.parallel(lambda first, stop, worker: seen.append((first, stop, worker)), 10)
        assert sorted(seen) == [(0, 5, 0), (5, 10, 1)]
        seen.clear()
        threads.parallel(lambda first, stop, worker: seen.append((first, stop, worker)), 10, grain=6)
        assert seen == [(0, 10, 0)]  # two parts of 5 would be under the grain: the caller does it all
    finally:
        threads.set_num_threads(None)


def test_the_fused_resnet_matches_the_reference_backend_and_pytorch():
    _, (x,), (want,) = model_case("resnet18", "b1")
    fast, file = kuiper.load(RESNET, backend="numpy"), kuiper.load(RESNET, backend="reference")
    assert len(fast.order) == 26 and len(file.order) == 51
    assert sum(type(op.layer).__name__ == "FusedLayer" for op in fast.order) == 17
    (got,), (reference,) = fast.forward(x), file.forward(x)
    close(got, reference)
    close(got, want)
    np.testing.assert_array_equal(np.argmax(got, axis=1), np.argmax(want, axis=1))
    # a batch of three: the bands of all three images shared out over the threads; one thread gives the same,
    # to rounding
    _, (x3,), (want3,) = model_case("resnet18", "b3")
    (two,) = fast.forward(x3)
    threads.set_num_threads(1)
    try:
        (one,) = fast.forward(x3)
    finally:
        threads.set_num_threads(None)
    close(two, want3)
    close(one, two)


def test_the_commands_in_the_notes(capsys):
    try:
        outputs = check_shell_commands(13, capsys)
    finally:
        threads.set_num_threads(None)  # `kuiper run --threads 1` sets the count for the whole process
    assert "on reference, input" in outputs["kuiper run --backend reference --repeat 10"]
    assert "on numpy, 1 thread(s)" in outputs["kuiper run --backend numpy --threads 1"]
    for command, text in outputs.items():
        assert "matches the saved PyTorch output" in text, command
    for command in ("kuiper run --backend reference --repeat 10", "kuiper run --backend numpy --repeat 10"):
        assert "(median of 10)" in outputs[command]
