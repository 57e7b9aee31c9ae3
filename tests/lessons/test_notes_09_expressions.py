"""The claims of lesson 9: tokens, trees, reverse Polish form, stack evaluation, and the Expression layer."""

import numpy as np
import pytest

import kuiper
from kuiper import LayerError
from kuiper.layers.expression_parser import (
    Apply, Call, ExpressionSyntaxError, Literal, Operand, parse, to_rpn, tokenize,
)
from kuiper.runtime.backends import make_layer
from lesson_tools import MODELS, check_shell_commands, model_case

FUNCTIONS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "max": np.maximum, "min": np.minimum, "neg": np.negative, "abs": np.abs, "exp": np.exp,
    "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v),
}


def evaluate(rpn, inputs):
    """A stack machine over the reverse Polish form, independent of the layer's compiled program."""
    stack = []
    for item in rpn:
        if isinstance(item, Operand):
            stack.append(np.asarray(inputs[item.index], dtype=np.float64))
        elif isinstance(item, Literal):
            stack.append(item.value)
        else:
            args = stack[len(stack) - item.arity:]
            del stack[len(stack) - item.arity:]
            stack.append(FUNCTIONS[item.name](*args))
    assert len(stack) == 1
    return stack[0]


def test_tokens_of_a_nested_call():
    tokens = tokenize("add(mul(@0,@1),-1.5e-3)")
    assert [(t.kind, t.text) for t in tokens] == [
        ("name", "add"), ("(", "("), ("name", "mul"), ("(", "("), ("operand", "@0"), (",", ","),
        ("operand", "@1"), (")", ")"), (",", ","), ("number", "-1.5e-3"), (")", ")")]
    assert [t.position for t in tokens][:5] == [0, 3, 4, 7, 8]


def test_tree_and_reverse_polish_form():
    tree = parse("sub(add(@0,mul(@1,2.5)),1)")
    assert tree == Call("sub", (Call("add", (Operand(0), Call("mul", (Operand(1), Literal(2.5))))), Literal(1)))
    assert str(tree) == "sub(add(@0,mul(@1,2.5)),1)"
    rpn = to_rpn(tree)
    assert [str(i) for i in rpn] == ["@0", "@1", "2.5", "mul", "add", "1", "sub"]
    assert rpn[3] == Apply("mul", 2)
    assert isinstance(parse("mul(@0,3)").args[1].value, int)


CASES = [
    # expression, input shapes, the same computation written directly in numpy
    ("add(mul(@0,@1),@2)", [(2, 3), (2, 3), (3,)], lambda a, b, c: a * b + c),
    ("sub(add(@0,mul(@1,2.5)),1)", [(2, 4, 3), (2, 1, 3)], lambda a, b: a + 2.5 * b - 1),
    ("div(neg(@0),add(abs(@1),1))", [(3, 5), (5,)], lambda a, b: -a / (np.abs(b) + 1)),
    ("rsqrt(add(mul(@0,@0),1))", [(4, 4)], lambda a: 1 / np.sqrt(a * a + 1)),
    ("max(@0,min(@1,0.5))", [(2, 1, 4), (3, 1)], lambda a, b: np.maximum(a, np.minimum(b, 0.5))),
    ("add(@0,@0)", [(6,)], lambda a: a + a),
]


@pytest.mark.parametrize("text,shapes,direct", CASES)
def test_layer_stack_evaluator_and_numpy_agree(text, shapes, direct):
    rng = np.random.default_rng(len(text))
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    layer = make_layer("pnnx.Expression", params={"expr": text}, input_shapes=shapes)
    (got,) = layer.run_numpy(*inputs)
    wide = [x.astype(np.float64) for x in inputs]
    expected = direct(*wide)
    assert got.shape == np.broadcast_shapes(*shapes) == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(evaluate(to_rpn(parse(text)), inputs), expected, rtol=1e-12)


def test_build_time_errors():
    with pytest.raises(LayerError, match="unknown function 'frob'"):
        make_layer("pnnx.Expression", params={"expr": "frob(@0)"}, input_shapes=((2,),))
    with pytest.raises(LayerError, match="uses @3"):
        make_layer("pnnx.Expression", params={"expr": "add(@0,@3)"}, input_shapes=((2,), (2,)))
    with pytest.raises(ExpressionSyntaxError, match="ends where"):
        parse("add(@0,")
    with pytest.raises(ExpressionSyntaxError, match="position 7"):
        parse("add(@0 @1)")


def test_expr_two_inputs_matches_pytorch_and_the_stack_evaluator():
    param, inputs, expected = model_case("expr_two_inputs", "b2")
    graph = kuiper.load(param, backend="numpy")
    outputs = graph.forward(*inputs)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the same graph, interpreted by the stack evaluator alone
    values = {op.output_operands[0].name: x for op, x in zip(graph.input_operators, inputs)}
    for op in graph.operators:
        if op.type == "pnnx.Attribute":
            values[op.output_operands[0].name] = op.attrs["data"].numpy()
        elif op.type == "pnnx.Expression":
            rpn = to_rpn(parse(op.params["expr"].value))
            values[op.output_operands[0].name] = evaluate(rpn, [values[o.name] for o in op.input_operands])
    for operand, want in zip(graph.output_operands, expected):
        np.testing.assert_allclose(values[operand.name], want, rtol=1e-5, atol=1e-5)


def test_every_expression_in_the_models_parses_and_round_trips():
    count = 0
    for param in MODELS.glob("*/*.pnnx.param"):
        for op in kuiper.pnnx.parse_param(param).operators:
            if op.type == "pnnx.Expression":
                text = op.params["expr"].value
                tree = parse(text)
                assert parse(str(tree)) == tree  # printing the tree gives text that parses back to it
                assert sum(isinstance(i, Operand) for i in to_rpn(tree)) == text.count("@")
                count += 1
    assert count >= 13


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(9, capsys)
