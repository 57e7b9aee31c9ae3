"""Checkpoint of lesson 9: exercises/lesson_09.py's to_rpn without recursion, held to kuiper's recursive one on
every expression in the models, and to_infix, whose text Python evaluates to what kuiper's Expression layer
computes."""

import re

import numpy as np
import pytest

from kuiper.layers.expression_parser import Call, Operand, parse, to_rpn
from kuiper.runtime.backends import make_layer
from lesson_tools import MODEL_PARAMS, exercise, param_lines

ex = exercise(9)

OWN = ["add(mul(@0,@1),@2)", "sub(add(@0,mul(@1,2.5)),1)", "neg(@0)", "@0", "div(sub(@0,@1),add(@1,3))",
       "max(min(@0,1),neg(@1))", "sqrt(add(mul(@0,@0),mul(@1,@1)))", "sub(@0,sub(@1,@2))", "div(@0,div(@1,@2))"]


def model_expressions():
    found = []
    for param in MODEL_PARAMS:
        for tokens in param_lines(param):
            if tokens[0] == "pnnx.Expression":
                found += [t.split("=", 1)[1] for t in tokens if t.startswith("expr=")]
    return found


@pytest.mark.parametrize("text", OWN + model_expressions())
def test_to_rpn_is_kuipers(text):
    assert list(ex.to_rpn(parse(text))) == to_rpn(parse(text))


def test_to_rpn_does_not_recurse():
    tree = Operand(0)                # built by hand: parse() itself recurses
    for _ in range(3000):            # deeper than Python's recursion limit
        tree = Call("neg", (tree,))
    rpn = ex.to_rpn(tree)
    assert len(rpn) == 3001 and str(rpn[0]) == "@0" and all(str(item) == "neg" for item in rpn[1:])


FUNCTIONS = {"neg": np.negative, "max": np.maximum, "min": np.minimum, "sqrt": np.sqrt, "exp": np.exp,
             "log": np.log, "abs": np.abs, "pow": np.power, "rsqrt": lambda v: 1 / np.sqrt(v)}


@pytest.mark.parametrize("text", OWN + [t for t in model_expressions() if len(t) < 200])
def test_to_infix_evaluates_to_what_the_layer_computes(text):
    arity = 1 + max((int(k) for k in re.findall(r"@(\d+)", text)), default=0)
    rng = np.random.default_rng(len(text))
    values = [rng.uniform(0.5, 2.0, 6).astype(np.float32) for _ in range(arity)]
    infix = ex.to_infix(parse(text))
    assert "add(" not in infix and "mul(" not in infix and "sub(" not in infix and "div(" not in infix
    got = eval(re.sub(r"@(\d+)", r"v[\1]", infix), {"__builtins__": {}}, {"v": values, **FUNCTIONS})
    layer = make_layer("pnnx.Expression", params={"expr": text}, input_shapes=[v.shape for v in values])
    np.testing.assert_allclose(np.broadcast_to(got, (6,)), layer.run_numpy(*values)[0], rtol=1e-5)
