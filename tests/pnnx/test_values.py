"""Typing of parameter values and `(shape)TYPE` specs, on strings chosen to trip each rule."""

import math

import pytest

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx import parse_spec, parse_value
from kuiper.pnnx.records import (
    BOOL, COMPLEX, COMPLEX_LIST, FLOAT, FLOAT_LIST, INT, INT_LIST, NULL, STRING, STRING_LIST, Parameter,
)

TYPED = [
    # null
    ("None", NULL, None), ("()", NULL, None), ("[]", NULL, None),
    # bool: only these two spellings
    ("True", BOOL, True), ("False", BOOL, False), ("true", STRING, "true"),
    # int
    ("0", INT, 0), ("-3", INT, -3), ("2147483647", INT, 2147483647), ("-2147483648", INT, -2147483648),
    ("007", INT, 7),
    # float: '.' or 'e' makes a float
    ("1.5", FLOAT, 1.5), ("6.0", FLOAT, 6.0), ("5.", FLOAT, 5.0), ("1e-05", FLOAT, 1e-05),
    ("-1.5e+03", FLOAT, -1500.0), ("-1.000000e-5", FLOAT, -1e-05), ("3.000000e+38", FLOAT, 3e38),
    ("1.0E+02", FLOAT, 100.0),
    # strings: anything not starting with a digit or '-digit'
    ("zeros", STRING, "zeros"), ("same", STRING, "same"), ("bilinear", STRING, "bilinear"),
    ("torch.float", STRING, "torch.float"), ("ik,kj->ij", STRING, "ik,kj->ij"), ("-", STRING, "-"),
    ("+5", STRING, "+5"), (".5", STRING, ".5"), ("-abc", STRING, "-abc"), ("", STRING, ""),
    ("add(mul(@0,@0),@1)", STRING, "add(mul(@0,@0),@1)"),
    # non-finite floats arrive as strings, as in pnnx
    ("inf", STRING, "inf"), ("-inf", STRING, "-inf"), ("nan", STRING, "nan"), ("nan.0", STRING, "nan.0"),
    # anything naming a symbolic dimension stays text, even a list
    ("(1,%c,2)", STRING, "(1,%c,2)"), ("%batch", STRING, "%batch"),
    # int lists
    ("(1,2)", INT_LIST, [1, 2]), ("[3]", INT_LIST, [3]), ("(1)", INT_LIST, [1]),
    ("(-1,2147483647)", INT_LIST, [-1, 2147483647]),
    # float lists; ints in a float list are promoted, not dropped as pnnx would
    ("(2.0,2.0)", FLOAT_LIST, [2.0, 2.0]), ("(1.0,2.5e-3)", FLOAT_LIST, [1.0, 0.0025]),
    ("[-1.5e+03,0.5]", FLOAT_LIST, [-1500.0, 0.5]), ("(1,2.5)", FLOAT_LIST, [1.0, 2.5]),
    # string lists keep every element's text, numbers and inf/nan included
    ("(a,b)", STRING_LIST, ["a", "b"]), ("(1.0,inf)", STRING_LIST, ["1.0", "inf"]),
    ("(zeros,1)", STRING_LIST, ["zeros", "1"]), ("(,)", STRING_LIST, ["", ""]),
    # complex, as pnnx's writer prints it ("%e+%ej")
    ("2.000000e+00+3.000000e+00j", COMPLEX, 2 + 3j), ("1.0e+00+-2.5e+00j", COMPLEX, 1 - 2.5j),
    ("(1.0e+00+1.0e+00j,2.0e+00+0.0e+00j)", COMPLEX_LIST, [1 + 1j, 2 + 0j]),
    ("(1,2.0e+00+1.0e+00j)", COMPLEX_LIST, [1 + 0j, 2 + 1j]),
]


@pytest.mark.parametrize("text, code, value", TYPED, ids=[repr(t[0]) for t in TYPED])
def test_parse_value_types_like_pnnx(text, code, value):
    p = parse_value(text)
    assert p == Parameter(code, value, text)
    assert type(p.value) is type(value)
    if isinstance(value, list):
        assert [type(v) for v in p.value] == [type(v) for v in value]


BAD_VALUES = ["1x", "1.2.3", "12e", "1_000", "0x10", "-1.5e", "(1,2", "[1,2)", "(", "[", "(1,2x)",
              "1.0e+00+j", "2j", "1.0+2.0+3.0j",
              # expression text is no parameter list: the reader keeps pnnx.Expression's expr= raw instead
              "[int(size(@0,0)),-1]"]


@pytest.mark.parametrize("text", BAD_VALUES)
def test_parse_value_rejects_malformed_numbers_and_lists(text):
    with pytest.raises(PnnxFormatError, match="'"):
        parse_value(text)


@pytest.mark.parametrize("text, expected", [
    ("inf", math.inf), ("-inf", -math.inf), ("3", 3.0), ("0.25", 0.25), ("-1e-05", -1e-05),
])
def test_as_float_reads_numbers_and_infinities(text, expected):
    assert parse_value(text).as_float() == expected


@pytest.mark.parametrize("text", ["nan", "nan.0", "-nan", "-nan.0"])
def test_as_float_reads_nan_spellings(text):
    assert math.isnan(parse_value(text).as_float())


@pytest.mark.parametrize("text, expected", [
    ("(1,2)", [1.0, 2.0]), ("(0.5,2.0)", [0.5, 2.0]), ("(1.0,inf)", [1.0, math.inf]),
    ("(-inf,3,nan.0)", [-math.inf, 3.0, math.nan]),
])
def test_as_floats_reads_lists_with_infinities(text, expected):
    got = parse_value(text).as_floats()
    assert all(type(v) is float for v in got)
    assert [("nan" if math.isnan(v) else v) for v in got] == [("nan" if math.isnan(v) else v) for v in expected]


@pytest.mark.parametrize("text", ["zeros", "True", "None", "(1,2)", "infinity", "1.0e+00+1.0e+00j"])
def test_as_float_refuses_non_numbers(text):
    with pytest.raises(PnnxFormatError, match="not a number"):
        parse_value(text).as_float()


@pytest.mark.parametrize("text", ["(a,1)", "3", "inf", "()", "(1.0e+00+1.0e+00j)"])
def test_as_floats_refuses_non_number_lists(text):
    with pytest.raises(PnnxFormatError, match="not a list of numbers"):
        parse_value(text).as_floats()


SPECS = [
    ("(1,3,224,224)f32", False, ((1, 3, 224, 224), "f32")),
    ("(8)bf16", False, ((8,), "bf16")),
    ("()f32", False, ((), "f32")),
    ("(0,3)i64", False, ((0, 3), "i64")),
    ("(?,3,%h,%w)f16", True, ((None, 3, "h", "w"), "f16")),
    ("()i64", True, ((), "i64")),
    ("(1,2)null", True, ((1, 2), None)),
]


@pytest.mark.parametrize("text, dynamic, expected", SPECS)
def test_parse_spec(text, dynamic, expected):
    assert parse_spec(text, dynamic=dynamic) == expected


@pytest.mark.parametrize("text, dynamic", [
    ("(1,2)null", False), ("(?)f32", False), ("(%n)f32", False), ("1,2f32", True), ("(1,2", True),
    ("(1,2)", True), ("(1,-2)f32", True), ("(1,,2)f32", True), ("(1,2)F32", True), ("(%)f32", True),
    ("(1,2))f32", True), ("(1.5)f32", False),
])
def test_parse_spec_rejects(text, dynamic):
    with pytest.raises(PnnxFormatError, match="'"):
        parse_spec(text, dynamic=dynamic)
