"""pnnx.Expression on OpenCL (cl/expression.cl, the formula compiled in with -DEXPR) against its numpy
forward, on every device: every function, broadcasting over odd shapes, literals, constant expressions.

Each distinct expression is a program of its own, so the tests share expressions where they can: the
shape cases run one expression, and the functions are checked a domain at a time (see `one_per_row`).
"""

import numpy as np
import pytest

from conftest import assert_opencl_matches_numpy, fp16_twin
from kuiper.layers.expression import UNARY
from kuiper.layers.expression_parser import parse
from kuiper.opencl.expression import broadcast_layout, kept_nonzero, opencl_expression
from kuiper.runtime.backends import make_layer
from test_expression import FUNCTIONS

RNG = np.random.default_rng(5)


def expression(expr, *shapes):
    return make_layer("pnnx.Expression", backend="opencl", params={"expr": expr}, input_shapes=shapes)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def assert_half_storage_matches(layer, rt, *inputs):
    """On the first device, with half storage: the kernel computes on its inputs as half holds them, so numpy
    does too, and the two may differ by the output's own rounding to half (2^-11, relative)."""
    half = fp16_twin(rt)
    if half is None:
        return
    stored = [x.astype(np.float16).astype(np.float32) for x in inputs]
    with np.errstate(all="ignore"):
        (expected,) = layer.run_numpy(*stored)
    (got,) = layer.run_opencl(half, *inputs)
    np.testing.assert_allclose(got, expected, rtol=2.0**-11, atol=2.0**-24, err_msg="fp16")


# ---- how the expression is compiled --------------------------------------------------------------------

@pytest.mark.parametrize("text, code", [
    ("add(mul(@0,@1),2)", "fn_add(fn_mul(IN(0),IN(1)),2.0f)"),
    ("rsqrt(add(@0,1.000000e-05))", "fn_rsqrt(fn_add(IN(0),1e-05f))"),
    ("max(@3,-inf)", "fn_max(IN(3),-INFINITY)"),
    ("sub(@0,-2.5)", "fn_sub(IN(0),-2.5f)"),
    ("mul(@0,0.1)", "fn_mul(IN(0),0.1f)"),  # the float32 nearest 0.1, as numpy multiplies by
    ("@1", "IN(1)"),
])
def test_the_tree_is_written_as_one_opencl_expression_without_spaces(text, code):
    assert opencl_expression(parse(text)) == code


@pytest.mark.parametrize("out, ins, ndim, dims, strides", [
    ((3, 5, 7), [(3, 5, 7), (1,)], 1, [105], [[1], [0]]),            # whole or scalar: one flat dim
    ((2, 5, 7, 9), [(2, 5, 7, 9), (5, 1, 9)], 4, [9, 7, 5, 2], [[1, 9, 63, 315], [1, 0, 9, 0]]),
    ((3, 5, 7), [(3, 5, 7), (3, 1, 1)], 2, [35, 3], [[1, 35], [0, 1]]),  # 5 and 7 merge
    ((7, 13), [(13,), (7, 1)], 2, [13, 7], [[1, 0], [0, 1]]),
    ((1, 5, 1), [(1, 5, 1)], 1, [5], [[1]]),                         # size-1 dims dropped
])
def test_broadcast_layout_merges_dims_innermost_first(out, ins, ndim, dims, strides):
    got_ndim, got_dims, got_strides = broadcast_layout(out, tuple(ins))
    assert got_ndim == ndim
    assert list(got_dims) == dims + [1] * (8 - ndim)
    assert [list(s) for s in got_strides] == [st + [0] * (8 - ndim) for st in strides]


def test_more_than_eight_dims_after_merging_has_no_layout():
    a, b = (2, 1) * 4 + (2,), (1, 2) * 4 + (1,)
    assert broadcast_layout((2,) * 9, (a, b)) is None


# ---- broadcasting over odd shapes: one program for every case -------------------------------------------

@pytest.mark.parametrize("a, b", [
    ((1,), (1,)), ((3, 5, 7, 9), (3, 5, 7, 9)), ((1, 5, 7, 13), (1, 5, 7, 13)),
    ((3, 5, 7, 9), (5, 1, 9)), ((1, 5, 1, 9), (3, 1, 7, 1)), ((13,), (7, 1)), ((), (3, 5)), ((3, 1, 7), ()),
    ((2, 1, 3, 1, 5, 1, 7), (1, 4, 1, 6, 1, 8, 1)),    # 7 dims that do not merge
    ((2, 1) * 4 + (2,), (1, 2) * 4 + (1,)),            # 9 such dims: beyond the kernel, run on the host
    ((3, 9000), (3, 1)),                               # rows longer than a CPU work-item's run
    ((2, 16, 9, 11), (2, 16, 1, 1)),                   # a squeeze-excitation's scale: a value a row on CPUs
])
@pytest.mark.parametrize("cpu", [True, False])
def test_broadcasting_matches_numpy(cl_runtime, monkeypatch, a, b, cpu):
    monkeypatch.setattr(cl_runtime, "is_cpu", cpu)  # runs along rows (CPUs), or an element per work-item
    layer = expression("add(mul(@0,@1),sub(@1,2.5))", a, b)
    assert_opencl_matches_numpy(layer, cl_runtime, rand(*a), rand(*b))


@pytest.mark.parametrize("batch", [1, 3])
def test_the_five_input_expression_of_expr_two_inputs(cl_runtime, batch):
    expr = ("add(sub(max(add(add(pow(@0,2),sqrt(add(abs(@1),0.5))),rsqrt(add(mul(@2,@2),1))),"
            "add(exp(neg(abs(@2))),log(add(mul(@1,@1),1)))),min(@3,@0)),@4)")
    shapes = [(batch, 5, 7, 9), (batch, 1, 7, 9), (batch, 5, 7, 9), (batch, 5, 7, 9), (1, 5, 1, 9)]
    assert_opencl_matches_numpy(expression(expr, *shapes), cl_runtime, *(rand(*s) for s in shapes))


def test_inputs_the_expression_does_not_use_are_skipped(cl_runtime):
    layer = expression("sub(@2,@0)", (3, 5), (7,), (5,))
    assert_opencl_matches_numpy(layer, cl_runtime, rand(3, 5), rand(7), rand(5))


def test_literals_of_every_form(cl_runtime):
    # one program: infinities, a negative int, a fraction float32 cannot hold, an exponent, literals alone
    expr = ("add(add(max(@0,-inf),min(@0,inf)),"
            "add(add(mul(@0,-3),sub(mul(2,3),@0)),add(div(@0,0.1),add(@0,1.000000e-05))))")
    assert_opencl_matches_numpy(expression(expr, (3, 7)), cl_runtime, rand(3, 7))


@pytest.mark.parametrize("expr, recorded, dtype", [
    ("mul(2,3)", [], np.int64), ("div(1,4)", [], np.float32), ("2.5", [], np.float32),
    ("add(2,-7)", [(3, 5)], np.int64),  # an input the expression never reads
])
def test_constant_expressions_are_computed_once_and_copied(cl_runtime, expr, recorded, dtype):
    layer = expression(expr, *recorded)
    for rt in filter(None, (cl_runtime, fp16_twin(cl_runtime))):  # the values are exact in half too
        (out,) = layer.run_opencl(rt, *(rand(*s) for s in recorded))
        assert out.shape == () and out.dtype == dtype
        assert out == layer.run_numpy(*(rand(*s) for s in recorded))[0]


def test_constants_too_small_for_half_storage_stay_nonzero():
    """An epsilon such as F.normalize's 1e-12 must not become 0 (tests/layers/test_aten.py runs swin_v2's case)."""
    values = np.array([1e-12, -1e-12, 0.0, 3e-8, 1e-3, np.inf], np.float32)
    least = np.finfo(np.float16).smallest_subnormal
    kept = kept_nonzero(values, np.dtype(np.float16))
    assert kept.dtype == np.float32
    np.testing.assert_array_equal(kept.astype(np.float16), np.array([least, -least, 0, least, 1e-3, np.inf], np.float16))
    assert kept_nonzero(values, np.dtype(np.float32)) is values  # fp32 storage keeps every float32


def test_integer_expressions_and_too_many_inputs_stay_on_the_host():
    assert not expression("and(@0,3)", (4,)).supports_opencl
    many = "@0"
    for i in range(1, 25):
        many = f"add({many},@{i})"
    assert not expression(many, *[(4,)] * 25).supports_opencl
    layer = expression("mul(@0,2)", (4,))
    layer.op.input_operands[0].dtype = "i64"
    assert not layer.supports_opencl
    assert expression("mul(@0,2)", (4,)).supports_opencl  # unrecorded dtypes are float32, as in the graph


# ---- every function --------------------------------------------------------------------------------------

def one_per_row(names: list, arity: int) -> str:
    """One expression that computes function k on row k of its arguments: the sum over k of
    f_k(@0[, @1]) * @(arity + k), where input arity + k is 1 on row k and 0 elsewhere. Every function of a
    group is finite on the group's domain, so the other terms are exact zeros and row k is f_k alone: one
    program checks a whole domain's functions, each on its own row."""
    args = ",".join(f"@{i}" for i in range(arity))
    terms = [f"mul({name}({args}),@{arity + k})" for k, name in enumerate(names)]
    expr = terms[0]
    for term in terms[1:]:
        expr = f"add({expr},{term})"
    return expr


def domain_groups() -> dict:
    groups = {}
    for name, (_, *domains) in sorted(FUNCTIONS.items()):
        groups.setdefault(tuple(domains), []).append(name)
    return groups


def sample(domain, shape):
    if domain == "nonzero":
        return RNG.uniform(0.5, 2.0, shape) * RNG.choice([-1.0, 1.0], shape)
    return RNG.uniform(*domain, shape)


@pytest.mark.parametrize("domains, names", list(domain_groups().items()),
                         ids=[",".join(names) for names in domain_groups().values()])
def test_every_function_matches_numpy(cl_runtime, domains, names):
    rows = len(names)
    shapes = [(rows, 3, 13), (rows, 1, 13)][:len(domains)]  # the second argument broadcasts
    args = [sample(d, s).astype(np.float32) for d, s in zip(domains, shapes)]
    if domains == (FUNCTIONS["round"][1],):
        args[0][:, 0, :6] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]  # ties go to the even neighbour
    masks = [np.eye(rows, dtype=np.float32)[:, k].reshape(rows, 1, 1) for k in range(rows)]
    layer = expression(one_per_row(names, len(domains)), *shapes, *(m.shape for m in masks))
    (expected,) = layer.run_numpy(*args, *masks)
    (got,) = layer.run_opencl(cl_runtime, *args, *masks)
    for name, g, e in zip(names, got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=name)
    assert_half_storage_matches(layer, cl_runtime, *args, *masks)


@pytest.mark.parametrize("name, a, b", [
    # Python's % and // at exact multiples, zeros, signs and infinities, where float rounding bites
    ("remainder", [7, -7, 7, -7, 0.3, -0.0, 5, np.inf, 1, 1], [0.7, 0.7, -0.7, -0.7, 0.1, 2, np.inf, 2, 0, -np.inf]),
    ("floor_divide", [7, -7, 7, -7, 0.3, 1, -1, 0, -0.0, np.inf], [0.7, 0.7, -0.7, -0.7, 0.1, 0, 0, 3, 3, 2]),
    ("maximum", [np.nan, 1, -0.0, np.inf, 2], [1, np.nan, 0, 3, -np.inf]),   # NaN propagates
    ("minimum", [np.nan, 1, -0.0, np.inf, 2], [1, np.nan, 0, 3, -np.inf]),
    ("logaddexp", [np.inf, -np.inf, 1, -100, np.nan], [np.inf, -np.inf, np.inf, -101, 1]),
    ("sign", [np.nan, -0.0, 0, -3, np.inf], [0, 0, 0, 0, 0]),              # b unused
])
def test_edge_values_match_numpy(cl_runtime, name, a, b):
    arity = 1 if name in UNARY else 2
    layer = expression(f"{name}({','.join(f'@{i}' for i in range(arity))})", (len(a),), (len(b),))
    args = [np.array(a, np.float32), np.array(b, np.float32)][:arity]
    with np.errstate(all="ignore"):
        (expected,) = layer.run_numpy(*args)
    (got,) = layer.run_opencl(cl_runtime, *args)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    assert_half_storage_matches(layer, cl_runtime, *args)


def test_the_deepest_expression_the_reader_takes_builds_on_opencl(cl_runtime):
    from kuiper.pnnx.reader import MAX_EXPRESSION_DEPTH

    layer = expression("neg(" * MAX_EXPRESSION_DEPTH + "@0" + ")" * MAX_EXPRESSION_DEPTH, (3, 4))
    assert_opencl_matches_numpy(layer, cl_runtime, rand(3, 4))
