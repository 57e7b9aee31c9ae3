"""Reading custom operator configs: the examples, and one test per mistake a config can make, each
raising CustomOpError with the file and the key."""

import re

import pytest

from kuiper import CustomOpError
from kuiper.custom import CustomOps, read_config
from custom_op_files import CHANNEL_SCALE, EXAMPLES, LEAKY_CLAMP, edited, write_op


def test_the_examples_read_as_written():
    leaky = read_config(LEAKY_CLAMP)
    assert leaky.type == "nn.Hardtanh" and leaky.entry == "leaky_clamp"
    assert leaky.kernel_file == LEAKY_CLAMP.parent / "leaky_clamp.cl"
    assert [(a.index, a.kind, a.target) for a in leaky.args] == [
        (0, "output", 0), (1, "input", 0), (2, "param", "slope")]
    assert [(p.name, p.type, p.default, p.define) for p in leaky.params] == [
        ("min_val", "float", -1.0, "LO"), ("max_val", "float", 1.0, "HI"), ("slope", "float", 0.0, None)]
    assert [f.text for f in leaky.global_size] == ["N*C*H*W"] and leaky.local_size is None
    assert leaky.worksize_tensor == ("output", 0)
    assert leaky.output_input == 0 and leaky.output_shape is None  # the output has input0's shape
    assert leaky.reference.__name__ == "leaky_clamp"

    scale = read_config(CHANNEL_SCALE)
    assert scale.type == "ChannelScale" and scale.options == ("-cl-mad-enable",)
    assert [(a.kind, a.target) for a in scale.args[2:]] == [("weight", "scale"), ("weight", "shift")]
    assert [f.text for f in scale.global_size] == ["W", "H", "N*C"] and scale.params == ()


def test_a_directory_stands_for_every_config_below_it():
    table = CustomOps.load([EXAMPLES])
    assert sorted(c.type for c in table) == ["ChannelScale", "nn.Hardtanh"]
    assert len(CustomOps.load([EXAMPLES, LEAKY_CLAMP])) == 2  # a file named twice is read once


def error_of(tmp_path, config: str) -> str:
    """The message of the CustomOpError reading `config` raises; it always starts with the file."""
    path = write_op(tmp_path, config)
    with pytest.raises(CustomOpError) as info:
        read_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    return message[len(f"{path}: "):]


def test_missing_kernel_file(tmp_path):
    message = error_of(tmp_path, edited('file = "scale.cl"', 'file = "nowhere.cl"'))
    assert message == f"kernel.file: no such file: {tmp_path / 'nowhere.cl'}"


# (what the config says, what it says instead, the message after the file name): one mistake each
MISTAKES = {
    "bad formula, with its column": (
        'global = ["N*C*H*W"]', 'global = ["W", "(N*C"]', "worksize.global[1]: missing ')' at column 5 of '(N*C'"),
    "argument index clash": (
        'index = 2, param', 'index = 1, param', "args[2].index: argument 1 is already bound by args[1]"),
    "argument index gap": (
        'index = 2, param', 'index = 3, param', "args: no binding for argument 2: indices must run from 0 to 2"),
    "unknown binding": (
        "index = 1, input = 0", "index = 1, tensor = 0",
        "args[1].tensor: unknown binding (an argument is bound to one of input, output, weight, param)"),
    "two bindings for one argument": (
        "index = 1, input = 0", 'index = 1, input = 0, weight = "w"',
        "args[1]: needs an index and exactly one of input, output, weight, param"),
    "param argument not declared": (
        'param = "alpha"', 'param = "beta"', "args[2].param: 'beta' is not declared in [params]"),
    "list param by value": (
        'alpha = { type = "float", default = 2.0', 'alpha = { type = "float[]"',
        "args[2].param: 'alpha' is a float[]: only int and float go by value"),
    "no argument receives the output": (
        "index = 0, output = 0", "index = 0, input = 0", "args: no argument receives output 0"),
    "unknown key": (
        'entry = "scale"', 'entry = "scale"\nentrypoint = "scale"',
        "kernel.entrypoint: unknown key (known: file, entry, options)"),
    "missing key": ('type = "test.Scale"\n', "", "type: missing"),
    "param type": (
        'type = "float", default = 2.0', 'type = "double", default = 2.0',
        "params.alpha.type: expected one of int, float, int[], float[], got 'double'"),
    "param default": ("default = 2.0", 'default = "two"', "params.alpha.default: expected a number, got 'two'"),
    "define taken by the automatic ones": (
        "default = 0.0 }", 'default = 0.0, define = "OUTPUT0_SIZE" }',
        "params.offset.define: OUTPUT0_SIZE is one of the automatic defines"),
    "define not an identifier": (
        "default = 0.0 }", 'default = 0.0, define = "2X" }',
        "params.offset.define: expected a C identifier or false, got '2X'"),
    "local sizes not one per global size": (
        'global = ["N*C*H*W"]', 'global = ["N*C*H*W"]\nlocal = ["4", "1"]',
        "worksize.local: has 2 sizes, worksize.global 1"),
    "output shape from an output": (
        'global = ["N*C*H*W"]', 'global = ["N*C*H*W"]\n[output]\nshape = "output0"',
        "output.shape: expected inputK (such as input0), got 'output0'"),
    "TOML syntax": ('entry = "scale"', "entry = scale", "not valid TOML: Invalid value (at line 11, column 9)"),
}


@pytest.mark.parametrize("old, new, expected", MISTAKES.values(), ids=MISTAKES.keys())
def test_config_mistakes_name_the_file_and_the_key(tmp_path, old, new, expected):
    assert error_of(tmp_path, edited(old, new)) == expected


def test_reference_function_must_exist(tmp_path):
    message = error_of(tmp_path, edited('"reference.py:scale"', '"reference.py:scal"'))
    assert message == f"reference: {tmp_path / 'reference.py'} has no function 'scal'"


def test_reference_module_that_fails_to_import(tmp_path):
    path = write_op(tmp_path, reference="import not_a_module_anywhere\n")
    with pytest.raises(CustomOpError, match=r"reference: importing .*reference.py failed: ModuleNotFoundError"):
        read_config(path)


def test_toml_syntax_errors_name_the_file(tmp_path):
    message = error_of(tmp_path, edited('entry = "scale"', "entry = scale"))
    assert message == "not valid TOML: Invalid value (at line 11, column 9)"


def test_two_configs_for_one_type(tmp_path):
    first, second = write_op(tmp_path / "a"), write_op(tmp_path / "b")
    with pytest.raises(CustomOpError, match=f"{re.escape(str(second))}: type: 'test.Scale' is already served by "
                                            f"{re.escape(str(first))}"):
        CustomOps.load([first, second])


def test_paths_that_hold_no_config(tmp_path):
    with pytest.raises(CustomOpError, match=r"nowhere.toml: no such custom operator config \(from custom_ops\)"):
        CustomOps.load(tmp_path / "nowhere.toml")
    with pytest.raises(CustomOpError, match=r"no custom operator config \(\*.toml\) in this directory"):
        CustomOps.load([tmp_path])
