"""The work-size and shape formulas of custom operators (kuiper/custom/formula.py)."""

import pytest

from kuiper.custom.formula import Formula, FormulaError, nchw

DIMS = {"N": 2, "C": 3, "H": 7, "W": 10}


@pytest.mark.parametrize("text, value", [
    ("N*C*H*W", 420),
    ("W + 15", 25),
    ("(W + 15) / 16 * 16", 16),      # round up to a multiple of 16
    ("N + C * H", 23),               # * before +
    ("(N + C) * H", 35),
    ("W - H - N", 1),                # left to right
    ("W / 3 / 2", 1),
    ("W % 4", 2),
    ("-N + 3", 1),
    ("C * -2", -6),
    ("-7 / 2", -4),                  # integer division rounds down
    ("  H*W  ", 70),
    (64, 64),                        # a TOML integer
])
def test_formulas_evaluate_with_integer_arithmetic(text, value):
    assert Formula(text)(DIMS) == value


@pytest.mark.parametrize("text, message, column", [
    ("N*C)", "unexpected ')'", 4),
    ("N*", "the formula ends too early", 3),
    ("", "empty formula", 1),
    ("(N*C", "missing ')'", 5),
    ("(N]", "unexpected character ']'", 3),
    ("N*X", "unknown name 'X'", 3),
    ("N N", "unexpected 'N'", 3),
    ("N ** 2", "unexpected '*'", 4),
    ("2.5 * N", "unexpected character '.'", 2),
])
def test_bad_formulas_say_what_and_where(text, message, column):
    with pytest.raises(FormulaError) as info:
        Formula(text)
    assert info.value.column == column
    assert str(info.value).startswith(f"{message} at column {column} of {text!r}")


def test_division_by_zero_names_the_dims():
    with pytest.raises(FormulaError, match=r"division by zero at column 3 of 'W % \(C - 3\)' \(N=2 C=3 H=7 W=10\)"):
        Formula("W % (C - 3)")(DIMS)


def test_shapes_of_rank_1_to_4_read_as_nchw():
    assert nchw((2, 3, 7, 10)) == DIMS
    assert nchw((4, 5)) == {"N": 4, "C": 5, "H": 1, "W": 1}
    assert nchw((6,)) == {"N": 6, "C": 1, "H": 1, "W": 1}
    for shape in ((), (1, 2, 3, 4, 5)):
        with pytest.raises(ValueError, match="rank 1 to 4"):
            nchw(shape)
