"""A custom operator's config: a TOML file, read and checked into an immutable OpConfig.

Everything that can be checked without a model is checked here, and every problem is a CustomOpError
naming the file and the key, e.g. `.../leaky_clamp.toml: args[2].param: 'slope' is not declared in
[params]`. What depends on the operator (its parameters, weights and inputs) is checked when a layer is
made for it (layer.py); what depends on the kernel's source, when it is compiled. The keys are
documented in course_notes/18-custom-opencl-operator.md.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from kuiper.custom.defines import RESERVED
from kuiper.custom.formula import Formula, FormulaError
from kuiper.core.errors import CustomOpError

PARAM_TYPES = ("int", "float", "int[]", "float[]")
BINDINGS = ("input", "output", "weight", "param")
_TENSOR = re.compile(r"(input|output)(\d+)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class ParamSpec:
    """An operator parameter the kernel (as a #define or an argument) or the reference reads."""

    name: str
    type: str            # one of PARAM_TYPES
    default: object      # None: the operator must have the parameter
    define: str | None   # the #define it becomes; None: none


@dataclass(frozen=True)
class ArgSpec:
    """Kernel argument `index` receives input `target`, output `target`, weight `target` (an attribute
    key) or param `target` (passed by value)."""

    index: int
    kind: str            # one of BINDINGS
    target: object
    key: str             # where the config says so ("args[2]"), for messages


@dataclass(frozen=True)
class OpConfig:
    path: Path
    type: str                        # the PNNX type served
    kernel_file: Path                # absolute
    entry: str
    options: tuple                   # extra compiler options
    params: tuple                    # ParamSpec
    args: tuple                      # ArgSpec, by index
    global_size: tuple               # Formula, 1 to 3
    local_size: tuple | None         # Formula, as many as global_size; None lets the driver choose
    worksize_tensor: tuple           # ("input" | "output", k): whose N, C, H, W the work sizes read
    output_input: int                # the input the output shape is taken from, or read by the formulas
    output_shape: tuple | None       # Formula per output dimension; None: the shape of that input
    reference: object                # numpy function(inputs, weights, params) -> array, or None
    reference_name: str | None       # as written in the config

    def error(self, key: str, message: str) -> CustomOpError:
        return CustomOpError(f"{self.path}: {key}: {message}")

    def param(self, name: str) -> ParamSpec:
        return next(spec for spec in self.params if spec.name == name)


def tensor_name(ref: tuple) -> str:
    return f"{ref[0]}{ref[1]}"


class _Checker:
    """Reads values out of the parsed TOML, raising CustomOpError with the file and the key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, message: str) -> NoReturn:
        raise CustomOpError(f"{self.path}: {key}: {message}")

    def table(self, value, key: str, allowed: tuple | None, required: tuple = ()) -> dict:
        """A TOML table with only `allowed` keys (None: any) and every `required` one."""
        if not isinstance(value, dict):
            self.fail(key, f"expected a table, got {value!r}")
        for name in value:
            if allowed is not None and name not in allowed:
                self.fail(f"{key}.{name}" if key else name, f"unknown key (known: {', '.join(allowed)})")
        for name in required:
            if name not in value:
                self.fail(f"{key}.{name}" if key else name, "missing")
        return value

    def string(self, value, key: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(key, f"expected a non-empty string, got {value!r}")
        return value

    def index(self, value, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(key, f"expected an integer >= 0, got {value!r}")
        return value

    def formulas(self, value, key: str, most: int) -> tuple:
        if not isinstance(value, list) or not 1 <= len(value) <= most:
            self.fail(key, f"expected a list of 1 to {most} formulas, got {value!r}")
        parsed = []
        for k, text in enumerate(value):
            if isinstance(text, bool) or not isinstance(text, (str, int)):
                self.fail(f"{key}[{k}]", f"expected a formula (a string or an integer), got {text!r}")
            try:
                parsed.append(Formula(text))
            except FormulaError as e:
                self.fail(f"{key}[{k}]", str(e))
        return tuple(parsed)

    def tensor(self, value, key: str, kinds=("input", "output")) -> tuple:
        match = _TENSOR.fullmatch(value) if isinstance(value, str) else None
        if match is None or match.group(1) not in kinds:
            self.fail(key, f"expected {' or '.join(k + 'K' for k in kinds)} (such as {kinds[0]}0), got {value!r}")
        if match.group(1) == "output" and match.group(2) != "0":
            self.fail(key, f"a custom operator has one output, output0; got {value!r}")
        return match.group(1), int(match.group(2))


def read_config(path) -> OpConfig:
    """Read and check one config file."""
    path = Path(path)
    check = _Checker(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CustomOpError(f"{path}: cannot read the config ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise CustomOpError(f"{path}: not valid TOML: {e}") from None
    check.table(data, "", ("type", "reference", "args", "kernel", "params", "worksize", "output"),
                ("type", "args", "kernel", "worksize"))

    kernel = check.table(data["kernel"], "kernel", ("file", "entry", "options"), ("file", "entry"))
    kernel_file = (path.parent / check.string(kernel["file"], "kernel.file")).resolve()
    if not kernel_file.is_file():
        check.fail("kernel.file", f"no such file: {kernel_file}")
    entry = check.string(kernel["entry"], "kernel.entry")
    options = kernel.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        check.fail("kernel.options", f"expected a list of strings, got {options!r}")

    params = _params(check, data.get("params", {}))
    worksize = check.table(data["worksize"], "worksize", ("global", "local", "tensor"), ("global",))
    global_size = check.formulas(worksize["global"], "worksize.global", 3)
    local_size = None
    if "local" in worksize:
        local_size = check.formulas(worksize["local"], "worksize.local", 3)
        if len(local_size) != len(global_size):
            check.fail("worksize.local", f"has {len(local_size)} sizes, worksize.global {len(global_size)}")
    output_input, output_shape = _output(check, data.get("output", {}))
    reference = data.get("reference")
    return OpConfig(
        path=path,
        type=check.string(data["type"], "type"),
        kernel_file=kernel_file,
        entry=entry,
        options=tuple(options),
        params=params,
        args=_args(check, data["args"], params),
        global_size=global_size,
        local_size=local_size,
        worksize_tensor=check.tensor(worksize.get("tensor", "output0"), "worksize.tensor"),
        output_input=output_input,
        output_shape=output_shape,
        reference=None if reference is None else _load_reference(check, path, reference),
        reference_name=reference,
    )


def _params(check: _Checker, table) -> tuple:
    specs, defines = [], {}
    for name, entry in check.table(table, "params", None).items():
        key = f"params.{name}"
        check.table(entry, key, ("type", "default", "define"), ("type",))
        type_ = entry["type"]
        if type_ not in PARAM_TYPES:
            check.fail(f"{key}.type", f"expected one of {', '.join(PARAM_TYPES)}, got {type_!r}")
        default = entry.get("default")
        if default is not None:
            default = _typed(check, default, type_, f"{key}.default")
        define = entry.get("define", name.upper())
        if define is not False:
            if not isinstance(define, str) or not _IDENTIFIER.fullmatch(define):
                check.fail(f"{key}.define", f"expected a C identifier or false, got {define!r}")
            if RESERVED.fullmatch(define):
                check.fail(f"{key}.define", f"{define} is one of the automatic defines")
            if define in defines:
                check.fail(f"{key}.define", f"{define} is also the define of params.{defines[define]}")
            defines[define] = name
        specs.append(ParamSpec(name, type_, default, define or None))
    return tuple(specs)


def _typed(check: _Checker, value, type_: str, key: str):
    """`value` as a config type; TOML's own int and float are told apart, bools are neither."""
    def fits(v) -> bool:
        numeric = (int,) if type_.startswith("int") else (int, float)
        return isinstance(v, numeric) and not isinstance(v, bool)

    if type_.endswith("[]"):
        if not isinstance(value, list) or not all(fits(v) for v in value):
            check.fail(key, f"expected a list of {type_[:-2]}s, got {value!r}")
        return tuple(float(v) if type_ == "float[]" else v for v in value)
    if not fits(value):
        check.fail(key, f"expected {'an int' if type_ == 'int' else 'a number'}, got {value!r}")
    return float(value) if type_ == "float" else value


def _args(check: _Checker, entries, params: tuple) -> tuple:
    if not isinstance(entries, list) or not entries:
        check.fail("args", "expected a list of bindings such as { index = 0, input = 0 }")
    declared = {spec.name: spec for spec in params}
    args, where = [], {}
    for k, entry in enumerate(entries):
        key = f"args[{k}]"
        if not isinstance(entry, dict):
            check.fail(key, f"expected a table such as {{ index = 0, input = 0 }}, got {entry!r}")
        for name in entry:
            if name != "index" and name not in BINDINGS:
                check.fail(f"{key}.{name}", f"unknown binding (an argument is bound to one of {', '.join(BINDINGS)})")
        kinds = [name for name in BINDINGS if name in entry]
        if "index" not in entry or len(kinds) != 1:
            check.fail(key, f"needs an index and exactly one of {', '.join(BINDINGS)}")
        index = check.index(entry["index"], f"{key}.index")
        kind = kinds[0]
        target = entry[kind]
        if kind == "input":
            check.index(target, f"{key}.input")
        elif kind == "output" and target != 0:
            check.fail(f"{key}.output", f"a custom operator has one output, output 0; got {target!r}")
        elif kind == "weight":
            check.string(target, f"{key}.weight")
        elif kind == "param":
            spec = declared.get(target)
            if spec is None:
                check.fail(f"{key}.param", f"{target!r} is not declared in [params]")
            if spec.type not in ("int", "float"):
                check.fail(f"{key}.param", f"{target!r} is a {spec.type}: only int and float go by value")
        if index in where:
            check.fail(f"{key}.index", f"argument {index} is already bound by {where[index]}")
        where[index] = key
        args.append(ArgSpec(index, kind, target, key))
    for index in range(len(args)):
        if index not in where:
            check.fail("args", f"no binding for argument {index}: indices must run from 0 to {len(args) - 1}")
    if not any(arg.kind == "output" for arg in args):
        check.fail("args", "no argument receives output 0")
    return tuple(sorted(args, key=lambda arg: arg.index))


def _output(check: _Checker, table) -> tuple:
    """(input index, formulas or None) from the [output] table."""
    check.table(table, "output", ("shape", "tensor"))
    shape = table.get("shape", "input0")
    if isinstance(shape, str):
        if "tensor" in table:
            check.fail("output.tensor", "goes with a list of formulas in output.shape")
        return check.tensor(shape, "output.shape", ("input",))[1], None
    formulas = check.formulas(shape, "output.shape", 4)
    return check.tensor(table.get("tensor", "input0"), "output.tensor", ("input",))[1], formulas


def _load_reference(check: _Checker, path: Path, text):
    """Import `file.py:function` (relative to the config) and return the function."""
    file, _, name = check.string(text, "reference").rpartition(":")
    if not file or not name:
        check.fail("reference", f"expected 'file.py:function', got {text!r}")
    module_path = (path.parent / file).resolve()
    if not module_path.is_file():
        check.fail("reference", f"no such file: {module_path}")
    spec = importlib.util.spec_from_file_location(f"kuiper_custom_reference.{module_path.stem}", module_path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code: whatever it raises, say which config it belongs to
        check.fail("reference", f"importing {module_path} failed: {type(e).__name__}: {e}")
    function = getattr(module, name, None)
    if not callable(function):
        check.fail("reference", f"{module_path} has no function {name!r}")
    return function
