"""The .pnnx.param reader and `load`, which joins it to the weights in the .pnnx.bin.

A .param file is text: the magic 7767517, a line `<operator count> <operand count>`, then one operator
per line, whitespace separated:
    type name n_in n_out in_operand... out_operand... key=value...
where `key=value` is a parameter, `@key=(shape)TYPE` an attribute stored in the .bin as member
`<name>.<key>`, `$key=operand` the name of an input slot and `#operand=(shape)TYPE` an operand's shape.

pnnx's own reader trusts its input; this one checks it and reports the file, the line and what is wrong.
Choices where pnnx is silent: a parameter or attribute key given twice on a line, an input slot name
given twice, and two different shapes for one operand are errors (pnnx keeps the last; its writer never
writes them). A `#` repeated with the same spec is fine: the writer repeats it when an operator takes
the same operand twice, and then each `$` names the next unnamed slot holding that operand (pnnx would
rename the first slot again). Operator names must be unique, since attribute members are named after them.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx.bin import BinFile
from kuiper.pnnx.records import STRING, Attribute, Graph, Operand, Operator, Parameter
from kuiper.pnnx.values import parse_spec, parse_value

MAGIC = "7767517"
#: how deeply a pnnx.Expression may nest calls. pnnx nests one level per fused operation (a sum of n terms
#: nests n - 1 deep), a few levels in real models. kuiper's parser, compiler and OpenCL writer recurse once per
#: level, well inside Python's recursion limit at this depth; and the OpenCL kernel, which nests the whole
#: expression in its source, stays under clang's limit of 256 nested brackets.
MAX_EXPRESSION_DEPTH = 128
_COUNT = re.compile(r"[0-9]+")
# pnnx splits on C's whitespace; str.split() would also split on Unicode spaces such as U+00A0
_tokens = re.compile(r"[^ \t\r\v\f]+").findall


def load(param_path, bin_path=None, weights=None, text: str | None = None) -> Graph:
    """Read a model: the .param file, and the .bin (default: the param path with its last suffix,
    normally `.param`, replaced by `.bin`) when some operator declares an `@` attribute; otherwise the
    .bin is not opened and Graph.bin_path is None. Attribute data are read-only zero-copy views of the
    memory-mapped .bin.

    A graph written by a program rather than read from disk gives `text` (the .param's content; `param_path`
    then only names it in messages) and may give `weights` instead of a .bin: any store with a `path` and the
    method `view(name, dtype, shape, declared_at)` of BinFile, as kuiper.llm binds a Hugging Face checkpoint's
    tensors to the decoder graph it writes."""
    graph = parse_param(param_path, text)
    declared = [(op, attr) for op in graph.operators for attr in op.attrs.values()]
    if not declared:
        return graph  # nothing to read: a missing .bin is fine, and bin_path stays None
    if weights is not None:
        store = weights
    else:
        if bin_path is None:
            bin_path = Path(graph.param_path).with_suffix(".bin")
        store = BinFile(bin_path)
    for op, attr in declared:
        attr.data = store.view(f"{op.name}.{attr.name}", attr.dtype, attr.shape,
                               declared_at=f"{graph.param_path}:{op.line}")
    graph.bin_path = store.path
    return graph


def parse_param(path, text: str | None = None) -> Graph:
    """Read a .param file alone (or its `text`, `path` naming it). Attributes are declared but carry no data
    (`data` is None)."""
    path = os.fspath(path)
    lines = _read_lines(path) if text is None else text.split("\n")
    if _tokens(lines[0]) != [MAGIC]:
        raise PnnxFormatError(f"{path}:1: expected the magic number {MAGIC}, got {lines[0].strip()[:40]!r}")
    if len(lines) < 2:
        raise PnnxFormatError(f"{path}:2: the file ends before the '<operator count> <operand count>' line")
    counts = _tokens(lines[1])
    if len(counts) != 2 or not all(_COUNT.fullmatch(c) for c in counts):
        raise PnnxFormatError(f"{path}:2: expected '<operator count> <operand count>', got {lines[1].strip()[:80]!r}")
    n_operators, n_operands = int(counts[0]), int(counts[1])

    body = lines[2:]
    while body and not _tokens(body[-1]):
        body.pop()
    builder = _GraphBuilder(path)
    # lines first, counts after: a broken line is reported where it is, not as a count mismatch
    for number, line in enumerate(body[:n_operators], start=3):
        builder.add_line(number, line)
    if len(body) < n_operators:
        raise PnnxFormatError(f"{path}:{len(body) + 3}: the file ends after {len(body)} operator lines, "
                              f"but line 2 declares {n_operators} (truncated?)")
    if len(body) > n_operators:
        raise PnnxFormatError(f"{path}:{n_operators + 3}: line 2 declares {n_operators} operators, "
                              f"but more lines follow")
    if len(builder.operands) != n_operands:
        raise PnnxFormatError(f"{path}:2: line 2 declares {n_operands} operands, "
                              f"but the operators produce {len(builder.operands)}")
    return Graph(param_path=path, bin_path=None, operators=builder.operators, operands=builder.operands)


def _read_lines(path: str) -> list:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PnnxFormatError(f"{path}: cannot open the param file ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise PnnxFormatError(f"{path}:{line}: not UTF-8 text (byte {e.start})") from None
    return text.split("\n")


class _GraphBuilder:
    """Turns operator lines into records, checking each line against what came before."""

    def __init__(self, path: str):
        self.path = path
        self.operators = []
        self.operands = {}
        self._operator_lines = {}  # operator name -> line
        self._shape_lines = {}     # operand name -> line of its first `#` spec

    def _error(self, line: int, what: str) -> PnnxFormatError:
        return PnnxFormatError(f"{self.path}:{line}: {what}")

    def _op_error(self, op: Operator, what: str) -> PnnxFormatError:
        return self._error(op.line, f"operator {op.name}: {what}")

    def add_line(self, number: int, text: str):
        tokens = _tokens(text)
        if not tokens:
            raise self._error(number, "empty line where an operator was expected")
        if len(tokens) < 4:
            raise self._error(number, f"expected 'type name n_in n_out ...', got {len(tokens)} tokens")
        op_type, name, n_in, n_out = tokens[:4]
        if not (_COUNT.fullmatch(n_in) and _COUNT.fullmatch(n_out)):
            raise self._error(number, f"operator {name}: input and output counts must be whole numbers, "
                                      f"got {n_in!r} {n_out!r}")
        n_in, n_out = int(n_in), int(n_out)
        if name in self._operator_lines:
            raise self._error(number, f"operator name {name!r} is already used on line {self._operator_lines[name]}")

        rest = tokens[4:]
        n_names = next((i for i, t in enumerate(rest) if "=" in t), len(rest))
        if n_names < n_in + n_out:
            raise self._error(number, f"operator {name} declares {n_in} inputs and {n_out} outputs "
                                      f"but lists {n_names} operand names")
        if n_names > n_in + n_out:
            raise self._error(number, f"operator {name}: token {rest[n_in + n_out]!r} is not key=value "
                                      f"(more operand names than the {n_in}+{n_out} declared?)")
        op = Operator(type=op_type, name=name, line=number, inputs=rest[:n_in],
                      outputs=rest[n_in:n_names], input_names=[""] * n_in, params={}, attrs={})
        self._link_operands(op)
        for token in rest[n_names:]:
            self._add_key_value(op, token)
        self._operator_lines[name] = number
        self.operators.append(op)

    def _link_operands(self, op: Operator):
        for operand in op.inputs:
            if operand not in self.operands:
                raise self._op_error(op, f"input operand {operand!r} is used before any operator produces it")
            self.operands[operand].consumers.append(op.name)
        for operand in op.outputs:
            if operand in self.operands:
                first = self.operands[operand].producer
                where = f"line {self._operator_lines[first]}" if first in self._operator_lines else "this line"
                raise self._op_error(op, f"operand {operand!r} is already produced by {first} ({where})")
            self.operands[operand] = Operand(name=operand, producer=op.name)

    def _add_key_value(self, op: Operator, token: str):
        key, equals, value = token.partition("=")
        if not equals or key in ("", "@", "$", "#"):
            raise self._op_error(op, f"token {token!r} is not key=value")
        prefix = key[0]
        if prefix == "$":
            self._add_input_name(op, key[1:], value)
            return
        try:
            if prefix in "@#":
                parsed = parse_spec(value, dynamic=prefix == "#")
            elif op.type == "pnnx.Expression" and key == "expr":
                # a little language of its own (nested calls, lists): kept as text for the runtime to parse
                parsed = Parameter(STRING, value, value)
                depth = max(itertools.accumulate((c == "(") - (c == ")") for c in value), default=0)
                if depth > MAX_EXPRESSION_DEPTH:
                    raise PnnxFormatError(f"calls nest {depth} deep, over kuiper's limit of {MAX_EXPRESSION_DEPTH}")
            else:
                parsed = parse_value(value)
        except PnnxFormatError as e:
            raise self._op_error(op, f"{key}: {e}") from None
        if prefix == "@":
            self._add_attribute(op, key[1:], parsed)
        elif prefix == "#":
            self._add_shape(op, key[1:], value, parsed)
        elif key in op.params:
            raise self._op_error(op, f"parameter {key!r} is given twice")
        else:
            op.params[key] = parsed

    def _add_attribute(self, op: Operator, key: str, spec: tuple):
        if key in op.attrs:
            raise self._op_error(op, f"attribute {key!r} is given twice")
        shape, dtype = spec
        op.attrs[key] = Attribute(name=key, dtype=dtype, shape=shape)

    def _add_input_name(self, op: Operator, key: str, operand: str):
        if key in op.input_names:
            raise self._op_error(op, f"input slot name {key!r} is given twice")
        # an operand can fill several slots (cat(x, x)); each `$` names the next unnamed one
        free = [i for i, (o, n) in enumerate(zip(op.inputs, op.input_names)) if o == operand and not n]
        if not free:
            why = "is not an input" if operand not in op.inputs else "has no unnamed input slot left"
            raise self._op_error(op, f"${key} names operand {operand!r}, which {why}")
        op.input_names[free[0]] = key

    def _add_shape(self, op: Operator, operand: str, text: str, spec: tuple):
        if operand not in op.inputs and operand not in op.outputs:
            raise self._op_error(op, f"#{operand} gives the shape of an operand that is not an input or "
                                     f"output of this operator")
        record = self.operands[operand]
        if operand not in self._shape_lines:
            record.shape, record.dtype = spec
            self._shape_lines[operand] = op.line
        elif (record.shape, record.dtype) != spec:
            raise self._op_error(op, f"#{operand}={text} disagrees with the spec on line "
                                     f"{self._shape_lines[operand]} (shape {record.shape}, type {record.dtype})")
