"""What the course's pages (and the README, docs/ and the examples' guide) cite must exist, and the lessons keep their measurements in the appendix.

Every file or folder a page of course_notes/ names by its path from the repository root (`kuiper/...`,
`cl/...`, `tests/...`, `tools/...`, `benchmarks/...`, `examples/...`, `exercises/...`, `solutions/...`,
`models/...`) must be there, and every dotted name `kuiper.x.y` must import or be an attribute of what
imports. A lesson holds no timing figure and names no particular machine or driver version: those belong in
course_notes/appendix-measurements.md, which says where each comes from.
"""

import importlib
import re

import pytest

from lesson_tools import ROOT

COURSE = sorted((ROOT / "course_notes").glob("*.md"))
LESSONS = [page for page in COURSE if re.fullmatch(r"\d\d-.*\.md", page.name)]
#: every page a reader meets cites only what exists: the course, the README, docs/, the examples' guide
PAGES = [*COURSE, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples/custom_ops/README.md"]

_PATH = re.compile(r"(?<![\w./-])((?:kuiper|cl|tests|tools|benchmarks|examples|exercises|solutions|models)/[\w./-]*)")
_DOTTED = re.compile(r"(?<![\w.])kuiper(?:\.[A-Za-z_]\w*)+")
_TEMPLATE = re.compile(r"NN|\bN\b|\*|<|MODEL|NAME|\.\.\.")
_PYTHON_BLOCK = re.compile(r"^```python\n.*?^```", re.S | re.M)


def prose(text: str) -> str:
    """The page without its ```python blocks: their doctests run, and fail on a name that is not there."""
    return _PYTHON_BLOCK.sub("", text)


def cited_paths(text: str) -> set:
    found = set()
    for match in _PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if _TEMPLATE.search(path) or text[match.end():match.end() + 1] == "{":
            continue  # a pattern such as tests/lessons/checkpoint_NN_*.py, not a file
        found.add(path)
    return found


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(value, name):
                return False
            value = getattr(value, name)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_file_exists(page):
    missing = sorted(path for path in cited_paths(prose(page.read_text())) if not (ROOT / path).exists())
    assert not missing, f"{page.name} cites files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_kuiper_name_exists(page):
    names = set(_DOTTED.findall(prose(page.read_text())))
    missing = sorted(name for name in names if not resolves(name))
    assert not missing, f"{page.name} names what kuiper does not have: {missing}"


def test_the_checks_find_what_they_look_for():
    text = ("see `kuiper/core/winograd.py`, `kuiper/cpu/`, cl/gemm.cl, `tests/lessons/checkpoint_NN_*.py` and "
            "kuiper.pnnx.load.")
    assert cited_paths(text) == {"kuiper/core/winograd.py", "kuiper/cpu/", "cl/gemm.cl"}
    assert set(_DOTTED.findall(text)) == {"kuiper.pnnx.load"}
    assert resolves("kuiper.pnnx.load") and resolves("kuiper.core.winograd.F2") and not resolves("kuiper.cpu.winograd")
    assert not (ROOT / "kuiper/cpu/winograd.py").exists()


# ---- measurements stay in the appendix -------------------------------------------------------------------------

_UNIT = r"(?:ms|µs|us|ns|s|seconds?|minutes?|GFLOP/s|GMAC/s|GB/s|TFLOP/s)"
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
TIMING = re.compile(rf"(?<![\w.]){_NUMBER}(?:\s*(?:-|–|to)\s*{_NUMBER})?\s*{_UNIT}(?![\w/])")
MACHINE = re.compile(r"Zen \d|EPYC|Xeon|Skylake|LLVM \d+|PoCL \d|Debian|H100|\bVM\b|vCPU")


def measurements(text: str) -> list:
    """The timing figures and machine names of a page's prose and tables (code blocks, where a doctest may
    print a size or a rate it computed, and `code` spans are left out). A table counts when a column is
    headed `time`, `ms` or `µs`, or the lines above it say "microseconds": each number in its rows is a
    figure."""
    found, in_code, lines = [], False, text.splitlines()
    for k, line in enumerate(lines):
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        found += [m.group(0) for m in TIMING.finditer(prose)] + MACHINE.findall(prose)
        if line.startswith("|") and not line.startswith("| ---"):
            start = k
            while start > 0 and lines[start - 1].startswith("|"):
                start -= 1
            header = {cell.strip() for cell in lines[start].strip("|").split("|")}
            before = " ".join(lines[max(0, start - 3):start])
            if k > start + 1 and (header & {"time", "ms", "µs"} or "microseconds" in before):
                found += [cell.strip() for cell in line.strip("|").split("|") if re.fullmatch(r"\s*[\d.,]+\s*", cell)]
    return found


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: p.name)
def test_lessons_leave_measurements_to_the_appendix(page):
    found = measurements(page.read_text())
    assert not found, f"{page.name} quotes {found}: put them in appendix-measurements.md and keep the ratio"


def test_the_appendix_holds_them_and_says_where_they_come_from():
    text = (ROOT / "course_notes" / "appendix-measurements.md").read_text()
    assert len(measurements(text)) > 100 and "## The machines" in text
    assert measurements("it took 0.7 s, 32.9-39.9 ms; `2s` is code\n\n| a | ms |\n| --- | --- |\n| x | 1.5 |\n") == \
        ["0.7 s", "32.9-39.9 ms", "1.5"]
