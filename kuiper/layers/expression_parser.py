"""Reading the `expr` text of a pnnx.Expression: tokens, then a tree, then reverse Polish form.

pnnx fuses chains of element-wise arithmetic into one operator and writes the computation as prefix
function calls, for example

    expr=add(mul(@0,@1),@2)             @0 * @1 + @2
    expr=rsqrt(add(@0,1.000000e-05))    1 / sqrt(@0 + 1e-5)

The grammar has three kinds of expression:

    expression := operand | number | name "(" expression ("," expression)* ")"
    operand    := "@" digits            the operator's input number N
    number     := an int or a float, maybe signed, maybe with an exponent: 2, -1, 0.5, 1.000000e-05, inf

`tokenize` cuts the text into tokens, `parse` builds the tree by recursive descent (one function per rule
of the grammar), and `to_rpn` flattens the tree into reverse Polish form, the operands before the function
that consumes them: `@0 @1 mul @2 add`. That flat form is what KuiperInfer evaluates with a stack, and what
the Expression layer compiles (see kuiper/layers/expression.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kuiper.pnnx.reader import MAX_EXPRESSION_DEPTH


class ExpressionSyntaxError(ValueError):
    """The text is not a well-formed expression; the message says where."""


# ---- tokens ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Token:
    kind: str      # "operand", "number", "name", or the punctuation itself: "(", ")", ","
    text: str
    position: int  # where the token starts in the text, for error messages


_TOKEN = re.compile(r"""
      (?P<operand> @\d+ )
    | (?P<number>  [-+]? (?: (?:\d+\.?\d*|\.\d+) (?:[eE][-+]?\d+)? | inf\b | nan\b ) )
    | (?P<name>    [A-Za-z_][\w.]* )
    | (?P<punct>   [(),] )
    | (?P<space>   \s+ )
""", re.VERBOSE)


def tokenize(text: str) -> list:
    """The tokens of `text`, in order; spaces are skipped."""
    tokens = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ExpressionSyntaxError(f"unexpected character {text[position]!r} at position {position}")
        kind = match.lastgroup
        if kind != "space":
            tokens.append(Token(match.group() if kind == "punct" else kind, match.group(), position))
        position = match.end()
    return tokens


def _number(text: str) -> int | float:
    # pnnx prints int constants with %d and float ones with %e (or shortest form): keep that distinction,
    # it decides whether an expression on integer tensors stays integer
    return int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)


# ---- the tree --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Operand:
    """@index: the operator's input number `index`."""
    index: int

    def __str__(self):
        return f"@{self.index}"


@dataclass(frozen=True)
class Literal:
    """A number written in the expression."""
    value: int | float

    def __str__(self):
        return repr(self.value)


@dataclass(frozen=True)
class Call:
    """name(args...): a function applied to sub-expressions."""
    name: str
    args: tuple

    def __str__(self):
        return f"{self.name}({','.join(str(a) for a in self.args)})"


class _Parser:
    """Recursive descent: `expression` reads one expression and calls itself for the arguments."""

    def __init__(self, tokens: list):
        self.tokens = tokens
        self.index = 0

    def peek(self) -> Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def next(self, wanted: str) -> Token:
        """Consume the next token; `wanted` says what should come, for the error when the text ends."""
        token = self.peek()
        if token is None:
            raise ExpressionSyntaxError(f"the text ends where {wanted} should follow")
        self.index += 1
        return token

    def expect(self, kind: str, function: Token) -> None:
        token = self.next(f"{kind!r} for {function.text!r}")
        if token.kind != kind:
            raise ExpressionSyntaxError(
                f"expected {kind!r} for {function.text!r} at position {token.position}, found {token.text!r}"
            )

    def expression(self, depth: int = 0):
        if depth > MAX_EXPRESSION_DEPTH:  # the reader refuses such files; this guards hand-made operators
            raise ExpressionSyntaxError(f"calls nest more than {MAX_EXPRESSION_DEPTH} deep")
        token = self.next("an expression")
        if token.kind == "operand":
            return Operand(int(token.text[1:]))
        if token.kind == "number":
            return Literal(_number(token.text))
        if token.kind == "name":
            self.expect("(", token)
            args = [self.expression(depth + 1)]
            while self.peek() is not None and self.peek().kind == ",":
                self.index += 1
                args.append(self.expression(depth + 1))
            self.expect(")", token)
            return Call(token.text, tuple(args))
        raise ExpressionSyntaxError(f"unexpected {token.text!r} at position {token.position}")


def parse(text: str):
    """The tree of `text`: an Operand, a Literal, or a Call whose args are trees."""
    parser = _Parser(tokenize(text))
    tree = parser.expression()
    extra = parser.peek()
    if extra is not None:
        raise ExpressionSyntaxError(f"unexpected {extra.text!r} at position {extra.position}, after the end")
    return tree


# ---- reverse Polish form ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Apply:
    """In reverse Polish form: apply function `name` to the last `arity` values."""
    name: str
    arity: int

    def __str__(self):
        return self.name


def to_rpn(tree) -> list:
    """The tree in reverse Polish form (post-order): each function after its arguments."""
    if isinstance(tree, Call):
        program = []
        for arg in tree.args:
            program += to_rpn(arg)
        program.append(Apply(tree.name, len(tree.args)))
        return program
    return [tree]
