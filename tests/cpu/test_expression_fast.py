"""The fast pnnx.Expression (kuiper/cpu/expression.py) against the reference, and its epilogue."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference
from cpu_tools import THREADS, assert_views_match_reference, running_on

from kuiper.cpu.elementwise import BLOCK
from kuiper.cpu.expression import FastExpression
from kuiper.layers.fused import Epilogue, EpilogueStep
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(13)

SMALL = (3, 5, 7)
LARGE = (2, 64, 56, 56)  # 6.1 blocks: one thread takes them all (PART_BLOCKS each)
LARGER = (1, 64, 112, 112)  # 12.25 blocks: three threads, the last block partial
assert np.prod(SMALL) < BLOCK < np.prod(LARGER) // 12


def floats(*shape, low=-4.0, high=4.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def with_special_values(x):
    """x with NaN, infinities and zeros in some places, among them the first and last of every block."""
    x = x.copy()
    flat = x.reshape(-1)
    places = [i for start in range(0, flat.size, BLOCK) for i in (start - 1, start) if i >= 0]
    places += list(RNG.choice(flat.size, min(flat.size, 40), replace=False))
    flat[places] = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)[np.arange(len(places)) % 4]
    return x


CASES = [
    # no operand broadcasts: the blocked path (below and above the block size)
    ("add(@0,@1)", lambda s: [floats(*s), floats(*s)]),
    ("add(mul(@0,2),neg(@1))", lambda s: [floats(*s), floats(*s)]),  # intermediates in the output and scratch
    ("add(mul(@0,@1),@2)", lambda s: [floats(*s), floats(*s), floats(*s)]),
    ("div(1,add(1,exp(neg(@0))))", lambda s: [floats(*s)]),
    ("mul(@0,erf(mul(@0,0.70710677)))", lambda s: [floats(*s)]),
    ("add(mul(@1,@1),@0)", lambda s: [floats(*s), floats(*s)]),  # one operand read twice
    ("add(@0,@2)", lambda s: [floats(*s), floats(7), floats(*s)]),  # @1 unused, of another shape
    ("max(@0,@1)", lambda s: [with_special_values(floats(*s)), floats(*s)]),
    ("sub(@0,@1)", lambda s: [with_special_values(floats(*s)), with_special_values(floats(*s))]),
    ("xor(@0,rshift(@1,1))", lambda s: [RNG.integers(-99, 99, s, np.int32), RNG.integers(0, 99, s, np.int32)]),
    ("add(@0,0.5)", lambda s: [floats(*s)]),
    # an operand broadcasts: slabs along the output's outermost axis longer than 1, operands sliced with them
    # where they run along it (with fewer dims, too), read whole where they are broadcast along it
    ("add(@0,@1)", lambda s: [floats(*s), floats(*s[:-2], 1, 1)]),
    ("mul(sub(@0,@1),@2)", lambda s: [floats(*s), floats(s[-1]), floats(*s[:-3], 1, 1, 1)]),
    ("mul(@0,@1)", lambda s: [floats(1), floats(*s)]),
    ("mul(@1,@0)", lambda s: [floats(*s[-3:-2], 1, 1), with_special_values(floats(*s))]),  # x * scale
    ("add(mul(@0,@1),@0)", lambda s: [floats(*s[:-1], 1), floats(*s)]),
    ("sub(@0,@1)", lambda s: [floats(1, 1, *s[-2:]), floats(*s[:-2], 1, 1)]),  # no operand has the output's shape
]


@pytest.mark.parametrize("shape", [SMALL, LARGE, LARGER], ids=["small", "large", "larger"])
@pytest.mark.parametrize("expr, make", CASES, ids=[f"{expr}-{i}" for i, (expr, _) in enumerate(CASES)])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf
def test_fast_expression_matches_reference(expr, make, shape):
    assert assert_every_path_matches_reference("pnnx.Expression", *make(shape), params={"expr": expr}) \
        == ["forward_numpy"]


def test_a_constant_expression_matches_reference():
    assert_every_path_matches_reference("pnnx.Expression", params={"expr": "mul(2,3)"})


@pytest.mark.parametrize("layout", ["strided input", "strided output", "both"])
def test_strided_arrays_match_reference(layout):
    a, b = floats(*LARGER), floats(*LARGER)
    if layout != "strided output":
        a = floats(*LARGER[:-1], 2 * LARGER[-1])[..., ::2]
    out = np.empty(LARGER + (2,), np.float32)[..., 0] if layout != "strided input" else np.empty(LARGER, np.float32)
    assert_views_match_reference("pnnx.Expression", [a, b], out, params={"expr": "add(mul(@0,2),@1)"})


def run_with_epilogue(expr, inputs, steps, main_inputs):
    """The fast expression on inputs[:main_inputs], then `steps` on its output (the fused operator's inputs
    are `inputs`), as FusedLayer runs it, at each thread count."""
    own = inputs[:main_inputs]
    layer = make_layer("pnnx.Expression", backend="numpy", params={"expr": expr}, input_shapes=[x.shape for x in own])
    assert isinstance(layer, FastExpression)
    results = []
    for count in THREADS:
        (shape,) = layer.output_shapes([x.shape for x in own])
        out = np.full(shape, np.nan, np.float32)
        with running_on(count):
            layer.forward_epilogue(own, [out], Epilogue(steps, inputs))
        results.append(out)
    return results


RELU = EpilogueStep(make_layer("nn.ReLU", input_shapes=[None]))


@pytest.mark.parametrize("shape", [SMALL, LARGE, LARGER], ids=["small", "large", "larger"])
def test_a_residual_add_with_a_relu_epilogue(shape):
    a, b = floats(*shape), floats(*shape)
    for out in run_with_epilogue("add(@0,@1)", [a, b], [RELU], 2):
        np.testing.assert_array_equal(out, np.maximum(a + b, 0))


@pytest.mark.parametrize("shape", [SMALL, LARGER], ids=["small", "larger"])
def test_an_epilogue_that_adds_another_input_block_by_block(shape):
    """The tensor a fused sum adds is read at the same flat span as the output."""
    a, b, c = floats(*shape), floats(*shape), floats(*shape)
    add_c = EpilogueStep(make_layer("pnnx.Expression", params={"expr": "add(@0,@1)"}, input_shapes=[None, None]), 2)
    for out in run_with_epilogue("mul(@0,@1)", [a, b, c], [add_c, RELU], 2):
        np.testing.assert_allclose(out, np.maximum(a * b + c, 0), rtol=1e-6)


@pytest.mark.parametrize("shape", [SMALL, LARGER], ids=["small", "larger"])
def test_an_epilogue_after_a_broadcast_runs_on_each_slab(shape):
    """The tensor a fused sum adds is read at the slab the thread has just written."""
    a, b, c = floats(*shape), floats(*shape[:-2], 1, 1), floats(*shape)
    add_c = EpilogueStep(make_layer("pnnx.Expression", params={"expr": "add(@0,@1)"}, input_shapes=[None, None]), 2)
    for out in run_with_epilogue("sub(@0,@1)", [a, b, c], [add_c, RELU], 2):
        np.testing.assert_allclose(out, np.maximum(a - b + c, 0), rtol=1e-6)
