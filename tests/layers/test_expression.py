"""pnnx.Expression: the tokenizer, the parser's tree, reverse Polish form, and evaluation against numpy."""

import math

import numpy as np
import pytest

from conftest import allocated_during
from kuiper.core.errors import LayerError, ShapeError
from kuiper.layers.expression import BINARY, UNARY
from kuiper.layers.expression_parser import (
    Apply, Call, ExpressionSyntaxError, Literal, Operand, Token, parse, to_rpn, tokenize,
)
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(11)


def expression(expr, *shapes):
    return make_layer("pnnx.Expression", params={"expr": expr}, input_shapes=shapes)


def run(expr, *inputs):
    (out,) = expression(expr, *(x.shape for x in inputs)).run_numpy(*inputs)
    return out


# ---- tokens, tree, reverse Polish form -------------------------------------------------------------------

def test_tokenize_names_operands_numbers_and_punctuation():
    assert tokenize("add(mul(@0,@12),-2.5e+00)") == [
        Token("name", "add", 0), Token("(", "(", 3), Token("name", "mul", 4), Token("(", "(", 7),
        Token("operand", "@0", 8), Token(",", ",", 10), Token("operand", "@12", 11), Token(")", ")", 14),
        Token(",", ",", 15), Token("number", "-2.5e+00", 16), Token(")", ")", 24),
    ]


def test_tokenize_skips_spaces():
    assert [t.text for t in tokenize(" sub( @0 , 1 ) ")] == ["sub", "(", "@0", ",", "1", ")"]


@pytest.mark.parametrize("text, value", [
    ("2", 2), ("-1", -1), ("0.5", 0.5), ("2.000000e+00", 2.0), ("1.000000e-5", 1e-5), ("-3.5E2", -350.0),
    ("inf", math.inf), ("-inf", -math.inf),
])
def test_numbers_keep_int_or_float(text, value):
    literal = parse(text)
    assert literal == Literal(value) and type(literal.value) is type(value)


def test_parse_builds_the_tree():
    assert parse("add(mul(@0,@1),@2)") == Call("add", (Call("mul", (Operand(0), Operand(1))), Operand(2)))
    assert parse("neg(@0)") == Call("neg", (Operand(0),))
    assert parse("rsqrt(add(@0,1.000000e-05))") == Call("rsqrt", (Call("add", (Operand(0), Literal(1e-05))),))


@pytest.mark.parametrize("text", ["add(mul(@0,@1),@2)", "div(sub(@0,2),@1)", "pow(@0,2)", "max(@0,-1.5)"])
def test_the_tree_prints_back_as_its_text(text):
    assert str(parse(text)) == text


@pytest.mark.parametrize("text, rpn", [
    ("add(mul(@0,@1),@2)", "@0 @1 mul @2 add"),
    ("div(sub(@0,2.000000e+00),@1)", "@0 2.0 sub @1 div"),
    ("neg(@0)", "@0 neg"),
    ("rsqrt(add(@0,1.000000e-05))", "@0 1e-05 add rsqrt"),
    ("sub(1,mul(@0,exp(@1)))", "1 @0 @1 exp mul sub"),
    ("@3", "@3"),
])
def test_reverse_polish_form_puts_functions_after_their_arguments(text, rpn):
    program = to_rpn(parse(text))
    assert " ".join(str(item) for item in program) == rpn
    assert [item.arity for item in program if isinstance(item, Apply)] == [
        len(call.args) for call in _calls_in_post_order(parse(text))
    ]


def _calls_in_post_order(tree):
    if not isinstance(tree, Call):
        return []
    return [c for arg in tree.args for c in _calls_in_post_order(arg)] + [tree]


@pytest.mark.parametrize("text, message", [
    ("log1p,@0", "expected '\\(' for 'log1p' at position 5"),  # what pnnx writes for torch.log1p
    ("add(@0,", "ends where an expression"),
    ("add(@0 @1)", "expected '\\)' for 'add' at position 7"),
    ("", "ends where an expression"),
    ("add()", "unexpected '\\)' at position 4"),
    ("add(@0,@1))", "unexpected '\\)' at position 10, after the end"),
    ("mul(@0,2)x", "unexpected 'x'"),
    ("mul(@0;2)", "unexpected character ';' at position 6"),
    ("@", "unexpected character '@'"),
])
def test_malformed_text_is_a_syntax_error_that_says_where(text, message):
    with pytest.raises(ExpressionSyntaxError, match=message):
        parse(text)


# ---- evaluation ------------------------------------------------------------------------------------------

A = RNG.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
B = RNG.uniform(0.5, 2.0, (3, 1)).astype(np.float32)
C = RNG.uniform(0.5, 2.0, (4,)).astype(np.float32)
D = RNG.uniform(0.5, 2.0, (2, 1, 1)).astype(np.float32)


@pytest.mark.parametrize("expr, inputs, reference", [
    ("add(mul(@0,@1),@2)", (A, B, C), lambda a, b, c: a * b + c),
    ("div(sub(@0,2.000000e+00),@1)", (A, B), lambda a, b: (a - 2) / b),
    ("neg(@0)", (A,), lambda a: -a),
    ("pow(@0,2)", (B,), lambda b: b**2),
    ("rsqrt(add(@0,1.000000e-05))", (A,), lambda a: 1 / np.sqrt(a + 1e-5)),
    ("@0", (A,), lambda a: a),
    ("mul(@1,@0)", (B, C), lambda b, c: c * b),  # the result (3, 4) is larger than either input
    ("add(mul(@1,@1),@0)", (A, B), lambda a, b: b * b + a),  # an intermediate smaller than the output
    ("add(exp(@0),exp(@1))", (A, D), lambda a, d: np.exp(a) + np.exp(d)),
    ("mul(add(@0,1),sub(@0,1))", (A,), lambda a: (a + 1) * (a - 1)),
    ("sub(mul(2,3),@0)", (B,), lambda b: 6 - b),  # literals only, inside
    ("mul(@0,sqrt(4))", (A,), lambda a: 2 * a),
    ("max(@0,-inf)", (C,), lambda c: c),
    # an expression pnnx wrote for models/expr_two_inputs, operands as in that file
    ("add(sub(max(add(add(pow(@0,2),sqrt(add(abs(@1),0.5))),rsqrt(add(mul(@2,@2),1))),"
     "add(exp(neg(abs(@2))),log(add(mul(@1,@1),1)))),min(@3,@0)),@4)",
     (A, B, C, A[::-1].copy(), D),
     lambda a, b, c, a2, d: np.maximum(a**2 + np.sqrt(np.abs(b) + 0.5) + 1 / np.sqrt(c * c + 1),
                                       np.exp(-np.abs(c)) + np.log(b * b + 1)) - np.minimum(a2, a) + d),
])
def test_evaluation_matches_numpy_with_broadcasting(expr, inputs, reference):
    out = run(expr, *inputs)
    expected = reference(*(x.astype(np.float64) for x in inputs))
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_the_program_is_compiled_once_in_reverse_polish_form():
    layer = expression("add(mul(@0,@1),@2)", (4,), (4,), (4,))
    assert layer.program == [
        ("input", 0), ("input", 1), ("apply", (np.multiply, 2)), ("input", 2), ("apply", (np.add, 2)),
    ]


@pytest.mark.parametrize("expr, shapes, temporary", [
    ("add(mul(@0,@1),@2)", [(2, 256, 512), (256, 1), (512,)], 0),  # mul fills the output, add updates it
    ("exp(neg(abs(@0)))", [(2, 256, 512)], 0),                    # each step in place
    ("add(exp(@0),exp(@1))", [(2, 256, 512), (2, 256, 512)], 1),  # exp(@0) holds the output meanwhile
    ("add(mul(@1,@1),@0)", [(2, 256, 512), (256, 512)], 0.5),     # mul's result is smaller than the output
])
def test_results_reuse_the_output_and_scratch_arrays(expr, shapes, temporary):
    """Peak memory of forward, in units of the output's size: the temporaries it allocates."""
    layer = expression(expr, *shapes)
    inputs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    out = np.empty(layer.output_shapes(shapes)[0], np.float32)
    peak = allocated_during(lambda: layer.forward_numpy(inputs, [out]))
    assert peak / out.nbytes == pytest.approx(temporary, abs=0.05)


# ---- every function pnnx writes --------------------------------------------------------------------------

def uniform(low, high, shape=(2, 3, 4)):
    return RNG.uniform(low, high, shape)


def signed(low, high, shape):
    return uniform(low, high, shape) * RNG.choice([-1.0, 1.0], shape)


ANY, POSITIVE, UNIT, ABOVE_ONE = (-3.0, 3.0), (0.1, 3.0), (-0.9, 0.9), (1.1, 3.0)
# name: (reference, domain of each argument); the second argument is broadcast from shape (3, 1)
FUNCTIONS = {
    "neg": (lambda a: -a, ANY), "abs": (np.abs, ANY), "sign": (np.sign, ANY), "square": (lambda a: a * a, ANY),
    "sqrt": (np.sqrt, POSITIVE), "rsqrt": (lambda a: 1 / np.sqrt(a), POSITIVE),
    "reciprocal": (lambda a: 1 / a, POSITIVE),
    "exp": (np.exp, ANY), "log": (np.log, POSITIVE), "log10": (np.log10, POSITIVE),
    "erf": (np.vectorize(math.erf), ANY),
    "floor": (np.floor, ANY), "ceil": (np.ceil, ANY), "trunc": (np.trunc, ANY), "round": (np.round, ANY),
    "sin": (np.sin, ANY), "cos": (np.cos, ANY), "tan": (np.tan, UNIT),
    "asin": (np.arcsin, UNIT), "acos": (np.arccos, UNIT), "atan": (np.arctan, ANY),
    "sinh": (np.sinh, ANY), "cosh": (np.cosh, ANY), "tanh": (np.tanh, ANY),
    "asinh": (np.arcsinh, ANY), "acosh": (np.arccosh, ABOVE_ONE), "atanh": (np.arctanh, UNIT),
    "add": (lambda a, b: a + b, ANY, ANY), "sub": (lambda a, b: a - b, ANY, ANY),
    "mul": (lambda a, b: a * b, ANY, ANY), "div": (lambda a, b: a / b, ANY, "nonzero"),
    "floor_divide": (lambda a, b: np.floor(a / b), ANY, "nonzero"),
    "remainder": (lambda a, b: a - b * np.floor(a / b), ANY, "nonzero"),
    "fmod": (lambda a, b: a - b * np.trunc(a / b), ANY, "nonzero"),
    "pow": (lambda a, b: a**b, POSITIVE, ANY),
    "max": (np.maximum, ANY, ANY), "maximum": (np.maximum, ANY, ANY),
    "min": (np.minimum, ANY, ANY), "minimum": (np.minimum, ANY, ANY),
    "atan2": (np.arctan2, ANY, ANY), "logaddexp": (lambda a, b: np.log(np.exp(a) + np.exp(b)), ANY, ANY),
}
BITWISE = {
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b, "rshift": lambda a, b: a >> b,
}


def test_every_function_of_the_layer_is_tested_here():
    assert set(FUNCTIONS) | set(BITWISE) == set(UNARY) | set(BINARY)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_function_matches_numpy(name):
    reference, *domains = FUNCTIONS[name]
    shapes = [(2, 3, 4), (3, 1)][:len(domains)]
    inputs = [signed(0.5, 2.0, s) if d == "nonzero" else uniform(*d, s) for d, s in zip(domains, shapes)]
    if name == "round":
        inputs[0][0, 0] = [-2.5, -1.5, -0.5, 0.5]  # ties go to the even neighbour, as in torch.round
    expr = f"{name}({','.join(f'@{i}' for i in range(len(inputs)))})"
    out = run(expr, *inputs)
    np.testing.assert_allclose(out, reference(*inputs), rtol=1e-7 if name == "erf" else 1e-12)


@pytest.mark.parametrize("name", sorted(BITWISE))
def test_bitwise_functions_on_integers(name):
    a = RNG.integers(0, 64, (2, 3, 4))
    b = RNG.integers(0, 4, (3, 1))
    out = run(f"{name}(@0,@1)", a, b)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, BITWISE[name](a, b))


@pytest.mark.parametrize("expr, dtype", [
    ("floor_divide(@0,2)", np.int64), ("mul(@0,3)", np.int64),          # integers stay integers
    ("div(@0,2)", np.float32), ("mul(@0,2.5)", np.float32), ("sqrt(@0)", np.float32),  # fractions: float32
])
def test_integer_inputs_follow_pytorch_dtype_rules(expr, dtype):
    x = np.array([5, 7, 9])
    out = run(expr, x)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, eval(expr.replace("@0", "x"), {
        "x": x, "floor_divide": np.floor_divide, "mul": np.multiply, "div": np.divide, "sqrt": np.sqrt,
    }))


def test_a_float_expression_of_a_float64_input_stays_float64():
    assert run("mul(@0,0.5)", np.ones(3)).dtype == np.float64


# ---- errors ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, shapes, message", [
    ("log1p,@0", [(4,)], "malformed expr='log1p,@0': expected '\\('"),
    ("add(@0,", [(4,)], "malformed"),
    ("foo(@0)", [(4,)], "unknown function 'foo'"),
    ("torch.float(@0)", [(4,)], "unknown function 'torch.float'"),
    ("add(@0)", [(4,)], "'add' takes 2 argument"),
    ("neg(@0,@1)", [(4,), (4,)], "'neg' takes 1 argument"),
    ("add(@0,@2)", [(4,), (4,)], "uses @2, but the operator has 2 input"),
])
def test_bad_expressions_raise_layer_error_naming_the_operator(expr, shapes, message):
    with pytest.raises(LayerError, match=message) as caught:
        expression(expr, *shapes)
    assert "pnnx.Expression operator 'op'" in str(caught.value)


def test_the_expr_parameter_is_required():
    with pytest.raises(LayerError, match="missing parameter 'expr'"):
        make_layer("pnnx.Expression", input_shapes=[(4,)])


def test_shapes_that_do_not_broadcast_raise_shape_error():
    layer = expression("add(@0,@1)", (2, 3), (4,))
    with pytest.raises(ShapeError, match=r"\(2, 3\), \(4,\) do not broadcast"):
        layer.output_shapes([(2, 3), (4,)])


def test_bitwise_functions_refuse_float_inputs():
    layer = expression("and(@0,3)", (4,))
    with pytest.raises(LayerError, match="bitwise and needs integer or bool inputs, got float32"):
        layer.output_dtypes([np.dtype(np.float32)])


@pytest.mark.parametrize("expr, sums", [("add(@0,@1)", True), ("add(@1,@0)", True), ("add(@0,@0)", False),
                                        ("sub(@0,@1)", False), ("add(@0,mul(@1,2))", False), ("add(@0,2)", False)])
def test_which_expressions_are_a_plain_sum_of_both_inputs(expr, sums):
    assert expression(expr, (2, 3), (2, 3)).adds_two_inputs is sums


def test_the_parser_refuses_nesting_past_the_readers_limit():
    from kuiper.pnnx.reader import MAX_EXPRESSION_DEPTH

    deepest = "neg(" * MAX_EXPRESSION_DEPTH + "@0" + ")" * MAX_EXPRESSION_DEPTH
    layer = make_layer("pnnx.Expression", params={"expr": deepest}, input_shapes=[(3,)])
    x = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(layer.run_numpy(x)[0], x)  # an even number of negations
    # a hand-made operator does not pass the reader: the parser keeps to the limit itself
    with pytest.raises(LayerError, match=rf"malformed expr='neg\(neg.*\.\.\.': calls nest more than "
                                         rf"{MAX_EXPRESSION_DEPTH} deep"):
        make_layer("pnnx.Expression", params={"expr": "neg(" + deepest + ")"}, input_shapes=[(3,)])
