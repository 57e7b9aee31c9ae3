"""The in-place activations (kuiper/cpu/activations.py): SiLU, Hardswish and GELU through work blocks, ReLU by
clip. The shared checks against the reference (every activation, special values, 1-3 threads) are in
test_elementwise_fast.py; here: overwriting the input, the parts of a fused convolution's output (views that
are not one run of memory), pieces around each layer's block, GELU's accuracy, and fusion into the operator
before them."""

import math

import numpy as np
import pytest

from cpu_tools import running_on
from test_elementwise_fast import with_special_values

import kuiper
from kuiper.cpu.activations import ThroughWorkBlock
from kuiper.cpu.registry import fast_class
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(5)
IN_PLACE = ["nn.SiLU", "F.silu", "nn.Hardswish", "F.hardswish", "nn.ReLU", "F.relu", "nn.GELU", "F.gelu"]


def silu(x):
    x = x.astype(np.float64)
    return x / (1 + np.exp(-x))  # float64: no overflow in the range the tests use


def gelu(x):
    return np.array([v * math.erfc(-v / math.sqrt(2)) / 2 for v in x.astype(np.float64)])


def expected(type, x):
    out = np.empty_like(x)
    make_layer(type, input_shapes=[x.shape]).forward_numpy([x], [out])
    return out


def assert_close(got, want, err_msg=""):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, float(np.nanmax(np.abs(want)))),
                               err_msg=err_msg)


@pytest.mark.parametrize("type", IN_PLACE)
def test_marked_in_place(type):
    assert fast_class(type).in_place


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 inside the reference formulas
@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("type", IN_PLACE)
def test_overwriting_the_input_matches_reference(type, count):
    x = with_special_values(RNG.standard_normal((1, 40, 57, 61)).astype(np.float32) * 6)  # 2.1 blocks
    want = expected(type, x)
    with running_on(count):
        make_layer(type, backend="numpy", input_shapes=[x.shape]).forward_numpy([x], [x])
    assert_close(x, want, type)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("blocks, extra", [(0, 1), (0, 7), (1, -1), (1, 0), (1, 1), (3, 5), (9, 3)])
@pytest.mark.parametrize("type", ["nn.SiLU", "nn.Hardswish", "nn.GELU"])
def test_apply_in_place_at_block_edges(type, blocks, extra, count):
    """apply itself, as the fused epilogue calls it (out is x), on flat arrays around the layer's block; a whole
    output of many blocks is shared over the threads."""
    x = RNG.standard_normal(blocks * fast_class(type).block + extra).astype(np.float32) * 6
    want = expected(type, x)
    with running_on(count):
        make_layer(type, backend="numpy", input_shapes=[x.shape]).apply(x, x)
    assert_close(x, want)


# parts of a (N, C, H, W) output that are not one run of memory: some channels' bands of rows (as a convolution's
# band epilogue hands over), a column slice, a part whose single channel exceeds SiLU's block, one whose channels
# do not
PARTS = {"bands": (slice(None), slice(3, 17)), "columns": (slice(None), slice(None), slice(1, 9)),
         "large channels": (slice(1, 3), slice(0, 300)), "channel range": (slice(2, 30), slice(0, 40))}


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("in_place", [True, False], ids=["in place", "into another"])
@pytest.mark.parametrize("type", ["nn.SiLU", "nn.Hardswish", "nn.ReLU", "nn.GELU"])
def test_apply_on_views(type, part, in_place):
    whole = RNG.standard_normal((1, 32, 320, 301)).astype(np.float32) * 6
    x = whole[(0, *PARTS[part])]
    assert not x.flags.c_contiguous
    want = expected(type, np.ascontiguousarray(x))
    target = np.zeros_like(whole)
    out = x if in_place else target[(0, *PARTS[part])]
    keep = whole.copy()
    with running_on(2):
        make_layer(type, backend="numpy", input_shapes=[x.shape]).apply(x, out)
    assert_close(out, want)
    written = whole if in_place else target
    untouched = np.ones(whole.shape, bool)
    untouched[(0, *PARTS[part])] = False
    np.testing.assert_array_equal(written[untouched], (keep if in_place else target)[untouched])  # nothing else


def through_work_blocks(type, x, **params):
    """The fast layer's forward on x, the layer checked to compute through work blocks."""
    layer = make_layer(type, backend="numpy", input_shapes=[x.shape], params=params)
    assert isinstance(layer, ThroughWorkBlock)
    out = np.empty_like(x)
    layer.forward_numpy([x], [out])
    return out


def test_silu_formula_is_accurate_over_the_float_range():
    x = np.linspace(-120, 120, 480001, dtype=np.float32)
    np.testing.assert_allclose(through_work_blocks("nn.SiLU", x), silu(x), rtol=1e-5, atol=1e-30)  # down to e^-120


def test_gelu_formula_is_accurate_over_the_float_range():
    """Relative precision wherever GELU is a normal float32 (x above about -13.15), to within float32's own
    rounding of the exponent -x²/2 (a few ulp of it, 6e-8·x²/2 each: the reference's error reaches 1.9e-5 at
    x = -13 too); below, subnormals, then 0."""
    x = np.linspace(-20, 20, 400001, dtype=np.float32)
    want = gelu(x)
    rtol = 5e-7 + 1.2e-7 * x.astype(np.float64) ** 2
    np.testing.assert_array_less(np.abs(through_work_blocks("nn.GELU", x) - want), rtol * np.abs(want) + 1e-40)


def test_gelu_tanh_formula_is_accurate_over_the_float_range():
    """As SiLU's: e^-2u overflows to inf where x / inf is the 0 that results below 3e-37 round to."""
    x = np.linspace(-20, 20, 400001, dtype=np.float32)
    u = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want = u / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
    out = through_work_blocks("nn.GELU", x, approximate="tanh")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-36)  # rounding of 2u, as in the reference


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 inside the reference formulas
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_special_values_are_the_references(approximate):
    """NaN, the infinities (GELU(-inf) is the reference's NaN), signed zeros and huge values, bit for bit."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 3e38, -3e38, 40, 41, -41], np.float32)
    options = {"input_shapes": [x.shape], "params": {"approximate": approximate}}
    want = np.empty_like(x)
    make_layer("nn.GELU", **options).forward_numpy([x], [want])
    make_layer("nn.GELU", backend="numpy", **options).forward_numpy([x], [x])
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(np.signbit(x), np.signbit(want))


FUSED = """7767517
6 5
pnnx.Input               in0     0 1 x #x=(1,3,40,50)f32
pnnx.Expression          e1      1 1 x a expr=mul(@0,2) #a=(1,3,40,50)f32
nn.SiLU                  s1      1 1 a b #b=(1,3,40,50)f32
nn.Hardswish             h1      1 1 b c #c=(1,3,40,50)f32
nn.ReLU                  r1      1 1 c d #d=(1,3,40,50)f32
pnnx.Output              out     1 0 d
"""


def test_fuse_into_the_operator_before_them(tmp_path):
    """SiLU and Hardswish ride along with the expression; the ReLU writes the graph output, which never fuses."""
    path = tmp_path / "fused.pnnx.param"
    path.write_text(FUSED)
    g = kuiper.load(path, backend="numpy")
    assert {op.name: [a.name for a in op.absorbed] for op in g.order if op.absorbed} == {"e1": ["e1", "s1", "h1"]}
    x = RNG.standard_normal((1, 3, 40, 50)).astype(np.float32) * 4
    reference = kuiper.load(path, backend="reference")
    assert_close(g.forward(x)[0], reference.forward(x)[0])
    b = silu(2 * x)
    assert_close(g.forward(x)[0], np.maximum(b * np.clip(b + 3, 0, 6) / 6, 0))
