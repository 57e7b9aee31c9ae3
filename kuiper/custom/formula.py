"""Integer formulas over a tensor's N, C, H, W: how a custom operator's config gives work sizes and
output shapes, e.g. `N*C*H*W` or `(W + 15) / 16 * 16`.

The grammar is small enough to parse by hand, which also means no text from a config ever reaches
Python's eval:

    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/" | "%") unary)*
    unary   := "-" unary | atom
    atom    := integer | N | C | H | W | "(" sum ")"

`/` and `%` are integer division and remainder (rounding down, as Python's // and %): sizes are counts.
"""

from __future__ import annotations

import re

DIMS = ("N", "C", "H", "W")

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<op>[-+*/%()])|(?P<bad>\S))")


class FormulaError(ValueError):
    """A formula that does not parse, or cannot be evaluated; `column` (1-based) is where it went wrong."""

    def __init__(self, text: str, message: str, column: int, hint: str = ""):
        self.text = text
        self.column = column
        super().__init__(f"{message} at column {column} of {text!r}" + (f" ({hint})" if hint else ""))


def nchw(shape) -> dict:
    """{"N":..., "C":..., "H":..., "W":...} of a shape of rank 1 to 4; missing trailing dims count as 1,
    so a (N, C) matrix reads as N x C x 1 x 1."""
    shape = tuple(int(d) for d in shape)
    if not 1 <= len(shape) <= len(DIMS):
        raise ValueError(f"custom operators take tensors of rank 1 to 4, not {len(shape)} (shape {shape})")
    return dict(zip(DIMS, shape + (1,) * (len(DIMS) - len(shape))))


def _tokens(text: str) -> list:
    """[(kind, value, column)], ending with ("end", "", column after the text)."""
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        kind = match.lastgroup
        column = match.start(kind) + 1
        if kind == "bad":
            raise FormulaError(text, f"unexpected character {match.group(kind)!r}", column)
        if kind == "name" and match.group(kind) not in DIMS:
            raise FormulaError(text, f"unknown name {match.group(kind)!r}", column, "formulas use N, C, H, W")
        tokens.append((kind, match.group(kind), column))
        position = match.end()
    tokens.append(("end", "", len(text.rstrip()) + 1))
    return tokens


class Formula:
    """A parsed formula; call it with a dict of N, C, H, W to get an int."""

    def __init__(self, text):
        self.text = str(text)
        self._tokens = _tokens(self.text)
        self._next = 0
        self._tree = self._sum()
        kind, value, column = self._tokens[self._next]
        if kind != "end":
            raise FormulaError(self.text, f"unexpected {value!r}", column)
        del self._tokens

    # ---- parsing: one method per grammar rule, each returning a tree of tuples -----------------------
    def _take(self):
        token = self._tokens[self._next]
        self._next += 1
        return token

    def _peek(self) -> str:
        kind, value, _ = self._tokens[self._next]
        return value if kind == "op" else kind

    def _sum(self):
        tree = self._product()
        while self._peek() in ("+", "-"):
            tree = (self._take()[1], tree, self._product())
        return tree

    def _product(self):
        tree = self._unary()
        while self._peek() in ("*", "/", "%"):
            _, op, column = self._take()
            tree = (op, tree, self._unary(), column)
        return tree

    def _unary(self):
        if self._peek() == "-":
            self._take()
            return ("neg", self._unary())
        return self._atom()

    def _atom(self):
        kind, value, column = self._take()
        if kind == "int":
            return ("int", int(value))
        if kind == "name":
            return ("name", value)
        if value == "(":
            tree = self._sum()
            kind, value, column = self._take()
            if value != ")":
                raise FormulaError(self.text, "missing ')'" if kind == "end" else f"expected ')', got {value!r}",
                                   column)
            return tree
        if kind == "end":
            raise FormulaError(self.text, "the formula ends too early" if self.text.strip() else "empty formula",
                               column)
        raise FormulaError(self.text, f"unexpected {value!r}", column)

    # ---- evaluation ---------------------------------------------------------------------------------
    def __call__(self, dims: dict) -> int:
        return self._eval(self._tree, dims)

    def _eval(self, tree, dims: dict) -> int:
        kind = tree[0]
        if kind == "int":
            return tree[1]
        if kind == "name":
            return dims[tree[1]]
        if kind == "neg":
            return -self._eval(tree[1], dims)
        a, b = self._eval(tree[1], dims), self._eval(tree[2], dims)
        if kind == "+":
            return a + b
        if kind == "-":
            return a - b
        if kind == "*":
            return a * b
        if b == 0:
            raise FormulaError(self.text, "division by zero", tree[3], _fmt(dims))
        return a // b if kind == "/" else a % b

    def __repr__(self):
        return f"Formula({self.text!r})"


def _fmt(dims: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())
