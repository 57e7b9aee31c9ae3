"""Checkpoint of lesson 3: exercises/lesson_03.py types parameter values and reads operand shapes the way
kuiper's reader does, on a table of edge cases and on every value and shape in the committed models."""

import pytest

import kuiper.pnnx
from kuiper.pnnx.values import parse_spec
from lesson_tools import MODEL_PARAMS, exercise, param_lines

ex = exercise(3)

TABLE = ["None", "()", "[]", "True", "False", "3", "-1", "0", "0.5", "1e-05", "-2.5e+03", "1.", "zeros", "inf",
         "-inf", "nan", "%batch", "e5", "(1,1)", "[3]", "(1,2.5)", "(1,-2)", "(a,b)", "(1,nan)", "(-1,%n)",
         "(1.0,2.0)", "reflect", "1.0"]


@pytest.mark.parametrize("text", TABLE)
def test_value_type_follows_the_rules(text):
    assert ex.value_type(text) == kuiper.pnnx.parse_value(text).type


def test_value_type_of_every_parameter_in_the_models():
    checked = 0
    for param in MODEL_PARAMS:
        for tokens in param_lines(param):
            for token in tokens[4:]:
                key, _, value = token.partition("=")
                if key[0] in "@$#" or value.endswith("j") or value.endswith("j)"):
                    continue  # weights, input names, shapes; complex numbers are beyond this exercise
                assert ex.value_type(value) == kuiper.pnnx.parse_value(value).type, token
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("text", ["(1,3,224,224)f32", "(1,3,?,%w)f32", "(%n,3,?,?)f16", "(64)i64", "(2,%len)bool"])
def test_shape_spec_reads_sizes_unknowns_and_symbols(text):
    shape, dtype = ex.shape_spec(text)
    assert (tuple(shape), dtype) == parse_spec(text, dynamic=True)


def test_shape_spec_of_every_operand_in_the_models():
    for param in MODEL_PARAMS:
        for tokens in param_lines(param):
            for token in tokens:
                if token.startswith("#"):
                    text = token.split("=", 1)[1]
                    shape, dtype = ex.shape_spec(text)
                    assert (tuple(shape), dtype) == parse_spec(text, dynamic=True), token
