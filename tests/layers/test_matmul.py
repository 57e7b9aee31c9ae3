"""Matrix products (kuiper/layers/matmul.py) against sums written out element by element in float64: torch.matmul's
broadcasting, torch.mm/bmm/addmm/baddbmm, torch.einsum against a textbook einsum, F.linear with its weight and
bias as inputs; every path (fast CPU, OpenCL on every device) against the reference; the GEMM layouts
(kuiper/opencl/matmul.py)."""

import itertools

import numpy as np
import pytest

from conftest import allocated_during, assert_every_path_matches_reference, assert_every_variant_matches_numpy
from kuiper.cpu import threads
from kuiper.core.errors import LayerError, ShapeError
from kuiper.opencl.matmul import gemm_layout
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(15)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def products(a, b):
    """a @ b by its definition, in float64: vectors promoted to matrices, every entry (i, j) the sum over k of
    a[..., i, k] * b[..., k, j], the batch dims broadcast by the element-wise product."""
    a2 = (a[None, :] if a.ndim == 1 else a).astype(np.float64)
    b2 = (b[:, None] if b.ndim == 1 else b).astype(np.float64)
    out = (a2[..., :, :, None] * b2[..., None, :, :]).sum(axis=-2)
    if a.ndim == 1:
        out = out[..., 0, :]
    return out[..., 0] if b.ndim == 1 else out


def textbook_einsum(equation, *operands):
    """Every assignment of values to the labels, the operands' entries at it multiplied into the output's entry."""
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    sizes = {}
    for term, x in zip(terms, operands):
        for label, size in zip(term, x.shape):
            sizes[label] = max(sizes.get(label, 1), size)  # a size-1 dim broadcasts
    labels = sorted(sizes)
    out = np.zeros([sizes[label] for label in output])
    for values in itertools.product(*(range(sizes[label]) for label in labels)):
        at = dict(zip(labels, values))
        term_product = 1.0
        for term, x in zip(terms, operands):
            term_product *= float(x[tuple(at[label] if n > 1 else 0 for label, n in zip(term, x.shape))])
        out[tuple(at[label] for label in output)] += term_product
    return out


def run(type, *inputs, **params):
    (out,) = make_layer(type, params=params, input_shapes=[x.shape for x in inputs]).run_numpy(*inputs)
    return out


# ---- torch.matmul, mm, bmm --------------------------------------------------------------------------------
MATMUL_SHAPES = [
    ((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
    ((4,), (4, 5)), ((4,), (2, 4, 5)),                  # 1-D x N-D: a row vector, its dim dropped
    ((3, 4), (4,)), ((2, 3, 4), (4,)),                 # N-D x 1-D: a column vector
    ((7,), (7,)),                                      # a dot product, 0-d
    ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),           # one side has no batch
    ((2, 1, 4), (4, 5)),                                # ... and one row per item: the items are the rows
    ((2, 1, 3, 4), (5, 4, 6)), ((1, 3, 4), (2, 1, 4, 5)),  # the batch broadcasts on both sides
    ((2, 3, 1, 3, 4), (3, 2, 4, 5)),                    # three batch dims
    ((0, 3, 4), (4, 5)), ((3, 0), (0, 5)),              # empty: no products, and products of no terms (zeros)
]


@pytest.mark.parametrize("a, b", MATMUL_SHAPES)
def test_matmul_broadcasts_like_the_definition(a, b):
    x, y = randn(*a), randn(*b)
    out = run("torch.matmul", x, y)
    assert out.shape == products(x, y).shape
    np.testing.assert_allclose(out, products(x, y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a, b", [s for s in MATMUL_SHAPES if 0 not in s[0]])
def test_matmul_every_path(a, b):
    assert_every_path_matches_reference("torch.matmul", randn(*a), randn(*b))


@pytest.mark.parametrize("type, a, b", [("torch.mm", (3, 4), (4, 5)), ("torch.bmm", (2, 3, 4), (2, 4, 5))])
def test_mm_and_bmm(type, a, b):
    x, y = randn(*a), randn(*b)
    np.testing.assert_allclose(run(type, x, y), products(x, y), rtol=1e-5, atol=1e-5)
    assert_every_path_matches_reference(type, x, y)


@pytest.mark.parametrize("type, a, b, message", [
    ("torch.matmul", (2, 3, 4), (5, 6), r"torch.matmul operator 'op': cannot multiply \(2, 3, 4\) by \(5, 6\): 4 "
                                        r"columns against 5 rows"),
    ("torch.matmul", (4,), (3,), r"cannot multiply \(4,\) by \(3,\)"),
    ("torch.matmul", (2, 3, 4), (3, 4, 5), r"cannot multiply \(2, 3, 4\) by \(3, 4, 5\): batch dims \(2,\) and "
                                           r"\(3,\) do not broadcast"),
    ("torch.matmul", (), (3,), r"cannot multiply \(\) by \(3,\): both need at least 1 dim"),
    ("torch.mm", (2, 3, 4), (4, 5), r"torch.mm operator 'op': multiplies 2-D tensors, got \(2, 3, 4\) and \(4, 5\)"),
    ("torch.bmm", (2, 3, 4), (1, 4, 5), r"torch.bmm operator 'op': cannot multiply \(2, 3, 4\) by \(1, 4, 5\): "
                                        r"batches of 2 and 1"),
])
def test_shape_errors_name_the_operator_and_both_shapes(type, a, b, message):
    layer = make_layer(type, input_shapes=[a, b])
    with pytest.raises(ShapeError, match=message):
        layer.output_shapes([a, b])


# ---- torch.addmm, torch.baddbmm ---------------------------------------------------------------------------
@pytest.mark.parametrize("type, shapes, alpha, beta", [
    ("torch.addmm", ((5,), (3, 4), (4, 5)), 1.5, 0.3),
    ("torch.addmm", ((3, 5), (3, 4), (4, 5)), 1, 1),     # pnnx writes the defaults as ints
    ("torch.addmm", ((3, 1), (3, 4), (4, 5)), -2.0, 1.0),
    ("torch.baddbmm", ((2, 3, 5), (2, 3, 4), (2, 4, 5)), 2.0, 0.5),
    ("torch.baddbmm", ((1, 5), (2, 3, 4), (2, 4, 5)), 1.0, 0.0),
])
def test_addmm_scales_the_product_and_adds_input(type, shapes, alpha, beta):
    added, a, b = (randn(*s) for s in shapes)
    out = run(type, added, a, b, alpha=alpha, beta=beta)
    np.testing.assert_allclose(out, beta * added + alpha * products(a, b), rtol=1e-5, atol=1e-5)
    assert_every_path_matches_reference(type, added, a, b, params=dict(alpha=alpha, beta=beta))


def test_beta_zero_ignores_input_nans_and_all():
    added = np.full((3, 5), np.nan, np.float32)
    a, b = randn(3, 4), randn(4, 5)
    want = products(a, b)  # an entry summing to near zero may differ by float32 rounding of the larger terms
    np.testing.assert_allclose(run("torch.addmm", added, a, b, alpha=1.0, beta=0.0), want, rtol=1e-5,
                               atol=1e-6 * np.abs(want).max())
    assert_every_path_matches_reference("torch.addmm", added, a, b, params=dict(alpha=1.0, beta=0.0))


def test_addmm_input_must_broadcast_to_the_product():
    layer = make_layer("torch.addmm", params=dict(alpha=1, beta=1), input_shapes=[(4,), (3, 4), (4, 5)])
    with pytest.raises(ShapeError, match=r"torch.addmm operator 'op': input \(4,\) does not broadcast to the "
                                         r"product's shape \(3, 5\)"):
        layer.output_shapes([(4,), (3, 4), (4, 5)])
    with pytest.raises(LayerError, match="'alpha' must be a number"):
        make_layer("torch.addmm", params=dict(alpha="x", beta=1), input_shapes=[(5,), (3, 4), (4, 5)])


# ---- torch.einsum -----------------------------------------------------------------------------------------
EINSUMS = [
    ("ijkln,ijkmn->ijklm", ((1, 4, 2, 5, 3), (1, 4, 2, 6, 3))),   # maxvit: Q @ K^T
    ("ijkln,ijknm->ijklm", ((1, 4, 2, 5, 6), (1, 4, 2, 6, 3))),   # maxvit: attention @ V
    ("ij,jk->ik", ((3, 4), (4, 5))),
    ("ji,jk->ik", ((4, 3), (4, 5))),                              # the first operand transposed
    ("ij,kj->ik", ((3, 4), (5, 4))),                              # the second transposed
    ("ik,kj->ji", ((3, 4), (4, 5))),                              # the output transposed
    ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
    ("bhqd,bhkd->bhqk", ((2, 3, 4, 5), (2, 3, 6, 5))),
    ("ijkl,ijlm->ijkm", ((2, 1, 3, 4), (1, 5, 4, 6))),            # size-1 dims broadcast
    ("bmk,bkn->mbn", ((3, 4, 5), (1, 5, 6))),                     # ... one whose output rows are not stacked
    ("bk,bkn->bn", ((3, 5), (1, 5, 6))),
    ("i,j->ij", ((3,), (4,))),                                    # an outer product: nothing summed
    ("ij,ij->i", ((3, 4), (3, 4))),                               # row-wise dot products
    ("ij,ij->", ((3, 4), (3, 4))),
    ("abc,cd->dba", ((2, 3, 4), (4, 5))),
    ("ij,jk->k", ((3, 4), (4, 5))),                               # i summed within the first operand alone
    ("ii->i", ((3, 3),)),                                         # a diagonal
    ("ii", ((4, 4),)),                                            # the trace (implicit output: none)
    ("ij,jk,kl->il", ((2, 3), (3, 4), (4, 5))),                   # three operands
    ("ij->ji", ((3, 4),)),
    ("ba,ac", ((3, 4), (4, 5))),                                  # implicit output: 'bc', alphabetical
]


@pytest.mark.parametrize("equation, shapes", EINSUMS)
def test_einsum_matches_the_textbook_sum(equation, shapes):
    operands = [randn(*s) for s in shapes]
    explicit = equation if "->" in equation else {"ii": "ii->", "ba,ac": "ba,ac->bc"}[equation]
    out = run("torch.einsum", *operands, equation=equation)
    np.testing.assert_allclose(out, textbook_einsum(explicit, *operands), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation, shapes", EINSUMS)
def test_einsum_every_path(equation, shapes):
    assert_every_path_matches_reference("torch.einsum", *(randn(*s) for s in shapes), params=dict(equation=equation))


def test_einsum_ellipsis_broadcasts_from_the_right():
    a, b = randn(2, 3, 4, 5), randn(3, 5, 6)
    out = run("torch.einsum", a, b, equation="...ij,...jk->...ik")
    np.testing.assert_allclose(out, products(a, b), rtol=1e-5, atol=1e-5)
    assert_every_path_matches_reference("torch.einsum", a, b, params=dict(equation="...ij,...jk->...ik"))


def test_einsum_opencl_needs_two_operands_and_a_gemm():
    def opencl(equation, *shapes):
        return make_layer("torch.einsum", backend="opencl", params=dict(equation=equation),
                          input_shapes=shapes).supports_opencl

    assert opencl("ijkln,ijkmn->ijklm", (1, 2, 2, 3, 4), (1, 2, 2, 5, 4))
    assert opencl("i,j->ij", (3,), (4,))
    assert not opencl("ii->i", (3, 3))                              # one operand
    assert not opencl("ij,jk,kl->il", (2, 3), (3, 4), (4, 5))       # three
    assert not opencl("ij,jk->k", (3, 4), (4, 5))                   # i summed within one operand
    assert not opencl("iij,jk->ik", (3, 3, 4), (4, 5))              # a diagonal


@pytest.mark.parametrize("equation, inputs, message", [
    ("ij,jk->ik", 3, r"torch.einsum operator 'op': equation=ij,jk->ik has 2 operand\(s\), the graph gives 3"),
    ("i1,jk->ik", 2, r"'i1' is not a term of letters and one '...'"),
    ("i...j...,jk->ik", 2, r"is not a term of letters"),
    ("ij,jk->iz", 2, r"the output must name each of its labels once, all from the operands"),
    ("ij,jk->ii", 2, r"the output must name each of its labels once"),
    ("...ij,jk->ik", 2, r"'...' must be in the output if and only if in an operand"),
])
def test_einsum_equation_errors(equation, inputs, message):
    with pytest.raises(LayerError, match=message):
        make_layer("torch.einsum", params=dict(equation=equation), input_shapes=[(3, 3)] * inputs)


@pytest.mark.parametrize("equation, shapes, message", [
    ("ij,jk->ik", [(3, 4), (5, 6)], r"label 'j' is 5 in operand 1 \(5, 6\), 4 in an operand before it"),
    ("ij,jk->ik", [(3, 4, 1), (4, 5)], r"operand 0 has shape \(3, 4, 1\), its term 'ij' names 2 dim\(s\)"),
    ("...ij,...jk->...ik", [(4,), (4, 5)], r"operand 0 has shape \(4,\), its term '...ij' names 2 dim\(s\)"),
    ("ii->i", [(3, 4)], r"label 'i' has sizes 3 and 4 in operand 0 \(3, 4\)"),
])
def test_einsum_shape_errors(equation, shapes, message):
    layer = make_layer("torch.einsum", params=dict(equation=equation), input_shapes=shapes)
    with pytest.raises(ShapeError, match=r"torch.einsum operator 'op': equation=.*" + message):
        layer.output_shapes(shapes)


# ---- F.linear ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [
    ((2, 3, 4), (6, 4), (6,)), ((2, 3, 4), (6, 4)), ((4,), (6, 4), (6,)), ((5, 4), (1, 4), (1,)),
    ((3, 4), (6, 4), ()), ((3, 4), (6, 4), (1,)),      # one bias value for every column
    ((3, 4), (6, 4), (1, 6)), ((3, 4), (6, 4), (3, 6)), ((3, 4), (6, 4), (3, 1)),  # biases that broadcast
    ((1, 512), (1000, 512), (1000,)),                  # a classifier: one row
    ((2, 64, 96), (288, 96), (288,)),                  # swin_v2_t's qkv, on 2 of its 49 windows
])
def test_linear_function(shapes):
    x, weight, *bias = (randn(*s) for s in shapes)
    out = run("F.linear", x, weight, *bias)
    expected = products(x, weight.T) + (bias[0] if bias else 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
    assert_every_path_matches_reference("F.linear", x, weight, *bias)


def test_the_fast_linear_function_writes_its_output_and_allocates_no_large_array():
    """F.linear's GEMM writes straight into the output and its bias is added in place: no temporary the size of
    an activation (swin_v2_t's qkv projection below is 3.5 MB), whatever the shapes met before."""
    layer = make_layer("F.linear", backend="numpy", input_shapes=[(64, 49, 96), (288, 96), (288,)])
    assert layer.workspace_bytes([(64, 49, 96), (288, 96), (288,)]) == 0
    threads.set_num_threads(1)
    try:
        for shape in ((64, 49, 96), (3, 96), (64, 49, 96), (2, 5, 96)):
            inputs = [randn(*shape), randn(288, 96), randn(288)]
            out = np.empty(shape[:-1] + (288,), np.float32)
            with threads.active():
                layer.forward_numpy(inputs, [out])
                peak = allocated_during(lambda: layer.forward_numpy(inputs, [out]))
            assert peak < 64 << 10, shape
            np.testing.assert_allclose(out, products(inputs[0], inputs[1].T) + inputs[2], rtol=1e-5, atol=1e-4)
    finally:
        threads.set_num_threads(None)


def test_linear_function_errors():
    shapes = [(2, 4), (6, 4), (288,)]
    layer = make_layer("F.linear", input_shapes=shapes)
    with pytest.raises(ShapeError, match=r"F.linear operator 'op': bias \(288,\) does not broadcast to the output "
                                         r"\(2, 6\) \(weight \(6, 4\)\)"):
        layer.output_shapes(shapes)
    with pytest.raises(ShapeError, match=r"cannot apply weight \(6, 5\) to input \(2, 4\): its last dim must be 5"):
        layer.output_shapes([(2, 4), (6, 5), (6,)])
    with pytest.raises(ShapeError, match=r"weight must be 2-D \(out_features, in_features\), got \(4,\)"):
        layer.output_shapes([(2, 4), (4,), (1,)])
    with pytest.raises(LayerError, match="expects input, weight and an optional bias, the graph gives 4 inputs"):
        make_layer("F.linear", input_shapes=[(2, 4), (6, 4), (6,), (6,)])
    with pytest.raises(LayerError, match="the bias must come as the third input"):
        make_layer("F.linear", params=dict(bias=True), input_shapes=[(2, 4), (6, 4)])
    make_layer("F.linear", params=dict(bias=None), input_shapes=[(2, 4), (6, 4)])  # what pnnx writes with no bias


# ---- the GEMM layouts -------------------------------------------------------------------------------------
def test_gemm_layout_reads_the_strides():
    # torch.matmul's stack: no copy, the batch one dim of items
    layout = gemm_layout(((0, "m", "k"), (0, "k", "n"), (0, "m", "n")), ((6, 3, 4), (6, 4, 5), (6, 3, 5)))
    assert (layout.m, layout.n, layout.k, layout.batch, layout.copied) == (3, 5, 4, ((6, 12, 20, 15),), 0)
    # a batch of inputs times one matrix: its batch dim becomes more rows of one GEMM
    layout = gemm_layout(((0, "m", "k"), (0, "k", "n"), (0, "m", "n")), ((6, 3, 4), (1, 4, 5), (6, 3, 5)))
    assert (layout.m, layout.batch, layout.copied) == (18, (), 0)
    # Q @ K^T as an einsum: K's depth is not unit-stride, so it is copied transposed
    layout = gemm_layout(("abln", "abmn", "ablm"), ((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 5, 6)))
    assert layout.y.shape == (2, 3, 4, 6) and layout.x.strides is None and layout.copied == 2 * 3 * 4 * 6
    # a classifier's one row: x @ W^T as W @ x^T, which copies nothing
    layout = gemm_layout(((0, "k"), ("n", "k"), (0, "n")), ((1, 512), (1000, 512), (1, 1000)))
    assert layout.swap and layout.copied == 0 and (layout.m, layout.n) == (1000, 1)
    # not GEMMs: a diagonal, a label summed within one operand
    assert gemm_layout(("iij", "jk", "ik"), ((3, 3, 4), (4, 5), (3, 5))) is None
    assert gemm_layout(("ij", "jk", "k"), ((3, 4), (4, 5), (5,))) is None


def test_every_gemm_variant_with_copies(cl_runtime):
    layer = make_layer("torch.einsum", params=dict(equation="ijkln,ijkmn->ijklm"),
                       input_shapes=[(1, 4, 2, 17, 8), (1, 4, 2, 33, 8)])
    names = assert_every_variant_matches_numpy(layer, cl_runtime, randn(1, 4, 2, 17, 8), randn(1, 4, 2, 33, 8))
    assert len(names) > 4
