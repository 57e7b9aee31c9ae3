"""Helpers the lesson checkpoints share: where things are, and checking the shell commands in the notes.

Not a conftest.py: a second module named conftest would shadow tests/conftest.py for `from conftest import`.

The notes' ```bash blocks are not doctests, so each checkpoint calls `check_shell_commands(N, capsys)`,
which finds every command in lesson N's bash blocks and verifies it: `kuiper ...` commands are run through
kuiper.app.cli.main and must exit 0; `python -m pytest FILES` must name files that exist; `kuiper lesson N`
must name a lesson (tests/lessons/test_course_cli.py runs that command for real, here it would recurse);
`pip install -e ".[extra]"` must name extras setup.cfg defines. `kuiper export` needs torch, which the
checkpoints do not: it and the later `kuiper` commands that name its output folder are parsed by kuiper's own
parser, not run (tests/test_export.py runs export for real). A command of any other form fails the
check, so a new kind of command cannot slip in unverified. course_notes/README.md goes through the same
check in test_course_cli.py.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import numpy as np

from kuiper.app import cli, course

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
RESNET = MODELS / "resnet18" / "resnet18.pnnx.param"

_BASH_BLOCK = re.compile(r"^[ \t]*```bash\n(.*?)^[ \t]*```", re.S | re.M)


def exercise(number: int):
    """Lesson `number`'s exercise module, from the package KUIPER_EXERCISES names: `exercises` (the student's,
    the default) or `solutions`. The checkpoints call what it defines; kuiper/app/course.py sets the variable."""
    package = os.environ.get(course.PACKAGE_ENV, course.EXERCISES)
    if package not in (course.EXERCISES, course.SOLUTIONS):
        raise ValueError(f"{course.PACKAGE_ENV}={package!r}: expected {course.EXERCISES!r} or {course.SOLUTIONS!r}")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"{package}.lesson_{number:02d}")


def lesson(number: int) -> course.Lesson:
    return course.get_lesson(number, ROOT)


def notes_text(number: int) -> str:
    return lesson(number).notes.read_text(encoding="utf-8")


def commands_in(text: str) -> list:
    """The commands in the ```bash blocks of a markdown text, without comments, in order."""
    commands = []
    for block in _BASH_BLOCK.findall(text):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def shell_commands(number: int) -> list:
    """The commands in lesson `number`'s ```bash blocks."""
    return commands_in(notes_text(number))


def run_cli(argv: list, capsys) -> tuple:
    """(exit status, stdout, stderr) of `kuiper ARGV`, run in this process."""
    capsys.readouterr()
    status = cli.main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def check_commands(commands: list, capsys, where: str) -> dict:
    """Verify each command (see the module docstring); {command: stdout} for the kuiper commands run."""
    outputs = {}
    exported = []  # the folders the `kuiper export` commands so far write
    assert commands, f"{where} has no ```bash commands"
    for command in commands:
        words = shlex.split(command)
        if words[:2] == ["kuiper", "export"]:
            args = _parsed(words, command)
            exported.append(Path(args.out or args.name or args.spec.rsplit(":", 1)[-1]))
        elif words[0] == "kuiper" and any(Path(w).parts[:len(d.parts)] == d.parts for w in words for d in exported):
            _parsed(words, command)
        elif words[:2] == ["kuiper", "lesson"]:
            assert len(words) == 3 and int(words[2]) in {l.number for l in course.find_lessons(ROOT)}, command
        elif words[:2] == ["kuiper", "lessons"]:
            pass  # runs every checkpoint: test_course_cli.py covers it
        elif words[0] == "kuiper":
            status, out, err = run_cli(words[1:], capsys)
            assert status == 0, f"`{command}` exited {status}: {err}"
            outputs[command] = out
        elif words[:3] == ["python", "-m", "pytest"]:
            files = [w for w in words[3:] if not w.startswith("-")]
            assert files, command
            for name in files:
                assert list(ROOT.glob(name)), f"`{command}`: {name} does not exist"
        elif words[:3] == ["pip", "install", "-e"] and words[3].startswith(".["):
            extras = words[3][2:-1].split(",")
            setup = (ROOT / "setup.cfg").read_text()
            for extra in extras:
                assert re.search(rf"^{extra}\s*=", setup, re.M), f"`{command}`: no extra '{extra}' in setup.cfg"
        else:
            raise AssertionError(f"{where}: no check knows the shell command `{command}`")
    return outputs


def _parsed(words: list, command: str):
    """`kuiper ...` parsed as kuiper would parse it (argparse exits on a bad command line: that fails here)."""
    try:
        return cli._parser().parse_args(words[1:])
    except SystemExit:
        raise AssertionError(f"`{command}` does not parse") from None


def check_shell_commands(number: int, capsys) -> dict:
    """Verify every shell command of lesson `number`; {command: stdout} for the kuiper commands."""
    return check_commands(shell_commands(number), capsys, f"lesson {number}")


def manifest() -> dict:
    return json.loads((MODELS / "manifest.json").read_text())


def model_case(name: str, case: str) -> tuple:
    """(param path, [inputs], [PyTorch outputs]) of a case saved by tools/export_models.py."""
    entry = manifest()["models"][name]
    for c in entry["cases"]:
        if c["name"] == case:
            return (MODELS / entry["param"], [np.load(MODELS / p) for p in c["inputs"]],
                    [np.load(MODELS / p) for p in c["outputs"]])
    raise KeyError(f"{name} has no case {case}")


def param_lines(path) -> list:
    """The operator lines of a .param file, each split into its whitespace-separated tokens."""
    lines = Path(path).read_text().splitlines()
    return [line.split() for line in lines[2:] if line.strip()]


# every committed model, and a small branchy graph that lessons 5 and 10 build by hand
MODEL_PARAMS = [MODELS / entry["param"] for entry in manifest()["models"].values()]

BLOCK = """7767517
6 5
pnnx.Input       in0    0 1 x #x=(1,2,3,3)f32
nn.ReLU          relu   1 1 x a #x=(1,2,3,3)f32 #a=(1,2,3,3)f32
pnnx.Expression  scale  1 1 a b expr=mul(@0,2) #a=(1,2,3,3)f32 #b=(1,2,3,3)f32
pnnx.Expression  add    2 1 b x c expr=add(@0,@1) #b=(1,2,3,3)f32 #x=(1,2,3,3)f32 #c=(1,2,3,3)f32
nn.Sigmoid       sig    1 1 c d #c=(1,2,3,3)f32 #d=(1,2,3,3)f32
pnnx.Output      out0   1 0 d
"""
