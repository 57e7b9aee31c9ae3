"""Checkpoint of lesson 1: exercises/lesson_01.py counts operator types and runs a saved case.

The answers come from elsewhere: the types from the .param text split by whitespace, the outputs from what
PyTorch computed at export (models/*/b*_out*.npy)."""

import collections

import numpy as np
import pytest

from lesson_tools import MODEL_PARAMS, RESNET, exercise, model_case, param_lines

ex = exercise(1)


def test_resnet18_has_20_convolutions_and_no_batchnorm():
    types = ex.operator_types(RESNET)
    assert types["nn.Conv2d"] == 20
    assert not any("BatchNorm" in kind for kind in types)


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_operator_types_count_every_line_of_the_file(param):
    assert ex.operator_types(param) == collections.Counter(tokens[0] for tokens in param_lines(param))


@pytest.mark.parametrize("name, case", [("resnet18", "b3"), ("pool_zoo", "b2"), ("expr_two_inputs", "b2")])
def test_run_case_gives_what_pytorch_computed(name, case):
    _, _, expected = model_case(name, case)
    outputs = ex.run_case(name, case)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
