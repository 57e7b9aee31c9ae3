"""The claims of lesson 3: the .param reader's records agree with the text, token by token."""

import re

import pytest

from kuiper import PnnxFormatError, pnnx
from lesson_tools import MODELS, check_shell_commands, manifest, param_lines

MODEL_PARAMS = [MODELS / entry["param"] for entry in manifest()["models"].values()]
SPEC = re.compile(r"\((.*)\)(\w+)")


def dims(text):
    """A shape written in the file, read independently of the reader: ? -> None, %s -> 's'."""
    if text == "":
        return ()
    return tuple(None if d == "?" else d[1:] if d.startswith("%") else int(d) for d in text.split(","))


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_records_agree_with_the_text(param):
    text = param.read_text().splitlines()
    assert text[0] == "7767517"
    n_ops, n_operands = map(int, text[1].split())
    graph = pnnx.parse_param(param)
    lines = param_lines(param)
    assert len(graph.operators) == len(lines) == n_ops
    assert len(graph.operands) == n_operands

    for op, tokens in zip(graph.operators, lines):
        op_type, name, n_in, n_out = tokens[0], tokens[1], int(tokens[2]), int(tokens[3])
        assert (op.type, op.name) == (op_type, name)
        assert op.inputs == tokens[4:4 + n_in]
        assert op.outputs == tokens[4 + n_in:4 + n_in + n_out]
        for token in tokens[4 + n_in + n_out:]:
            key, value = token.split("=", 1)
            if key.startswith("@"):
                shape, dtype = SPEC.fullmatch(value).groups()
                attr = op.attrs[key[1:]]
                assert (attr.shape, attr.dtype) == (dims(shape), dtype)
            elif key.startswith("#"):
                shape, dtype = SPEC.fullmatch(value).groups()
                operand = graph.operands[key[1:]]
                assert operand.shape == dims(shape)
                assert operand.dtype == (None if dtype == "null" else dtype)
            elif key.startswith("$"):
                assert key[1:] in op.input_names
                assert op.inputs[op.input_names.index(key[1:])] == value
            else:
                assert op.params[key].raw == value

    # producer and consumers, from the token lists alone
    for op, tokens in zip(graph.operators, lines):
        n_in, n_out = int(tokens[2]), int(tokens[3])
        for operand in tokens[4 + n_in:4 + n_in + n_out]:
            assert graph.operands[operand].producer == op.name
            readers = [t[1] for t in lines for o in t[4:4 + int(t[2])] if o == operand]
            assert graph.operands[operand].consumers == readers


TYPING = [
    # text, pnnx type code, value
    ("None", 0, None), ("()", 0, None), ("[]", 0, None),
    ("True", 1, True), ("False", 1, False),
    ("3", 2, 3), ("-1", 2, -1), ("0", 2, 0),
    ("0.5", 3, 0.5), ("1e-05", 3, 1e-05), ("1.000000e-05", 3, 1e-05), ("-2.5", 3, -2.5), ("1.0", 3, 1.0),
    ("zeros", 4, "zeros"), ("inf", 4, "inf"), ("nan", 4, "nan"), ("%batch", 4, "%batch"), ("e5", 4, "e5"),
    ("(1,1)", 5, [1, 1]), ("[3,-2]", 5, [3, -2]),
    ("(1,2.5)", 6, [1.0, 2.5]),
    ("(a,b)", 7, ["a", "b"]), ("(1,nan)", 7, ["1", "nan"]),
]


@pytest.mark.parametrize("text,code,value", TYPING)
def test_parameter_typing_rules(text, code, value):
    p = pnnx.parse_value(text)
    assert (p.type, p.value, p.raw) == (code, value, text)


def test_nonfinite_strings_read_as_floats():
    assert pnnx.parse_value("-inf").as_float() == float("-inf")
    assert pnnx.parse_value("(1,inf)").as_floats() == [1.0, float("inf")]


def test_operand_shapes_with_unknown_and_symbolic_dimensions(tmp_path):
    path = tmp_path / "dyn.pnnx.param"
    path.write_text("7767517\n3 2\n"
                    "pnnx.Input in0 0 1 x #x=(%n,3,?,?)f32\n"
                    "F.relu act 1 1 x y $input=x #x=(%n,3,?,?)f32 #y=(%n,3,?,?)f32\n"
                    "pnnx.Output out0 1 0 y\n")
    graph = pnnx.load(path)
    assert graph.operands["x"].shape == ("n", 3, None, None)
    assert graph.bin_path is None
    assert graph.operators[1].input_names == ["input"]
    assert pnnx.parse_spec("(1,3,?,%w)f32", dynamic=True) == ((1, 3, None, "w"), "f32")
    with pytest.raises(PnnxFormatError):
        pnnx.parse_spec("(1,?)f32", dynamic=False)  # attribute shapes must be whole numbers


def test_errors_name_the_file_and_the_line(tmp_path):
    path = tmp_path / "broken.pnnx.param"
    path.write_text("7767517\n2 1\npnnx.Input in0 0 1 x\nF.relu act 1 1 z y\n")
    with pytest.raises(PnnxFormatError, match=r"broken\.pnnx\.param:4: .*'z' is used before"):
        pnnx.parse_param(path)
    path.write_text("7767517\n3 2\npnnx.Input in0 0 1 x #x=(1)f33\n")
    with pytest.raises(PnnxFormatError, match=r":3: .*unknown element type 'f33'"):
        pnnx.parse_param(path)


def test_the_commands_in_the_notes(capsys):
    check_shell_commands(3, capsys)
