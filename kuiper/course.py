"""The course runner behind `kuiper lessons` and `kuiper lesson N`.

A lesson is a markdown file `course_notes/NN-short-title.md` (its title is its first `#` heading) and a
checkpoint, the test files `tests/lessons/test_lesson_NN_*.py`. Running a lesson runs pytest in a child
process on the checkpoint files plus the notes themselves, whose `>>>` examples pytest checks as doctests,
so the code printed in the notes is exactly the code that was tested.

pytest is asked for one short line per test (`-r ...p`), and each line is credited to the lesson whose
file it names; that way one pytest run can check every lesson at once.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kuiper.errors import KuiperError

ROOT = Path(__file__).resolve().parent.parent
NOTES_DIR = "course_notes"
CHECKPOINT_DIR = Path("tests") / "lessons"

_NOTES_NAME = re.compile(r"(\d{2})-[A-Za-z0-9_-]+\.md")
_HEADING = re.compile(r"#\s+(.+?)\s*#*\s*$")
_NUMBERED = re.compile(r"^Lesson\s+\d+\s*[:.-]\s*", re.I)
# the short summary lines pytest prints with -r: "PASSED path::test", "FAILED path::test - why",
# "ERROR path - why" (a file that did not import), "SKIPPED [1] path:12: why"
_RESULT_LINE = re.compile(r"(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+?)(?:::| - |$)")
_SKIPPED_LINE = re.compile(r"SKIPPED \[\d+\] (\S+?):")
_OUTCOME_KEY = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "errors",
                "XFAIL": "skipped", "SKIPPED": "skipped"}


class CourseError(KuiperError):
    """The course is not where it should be, or a lesson number does not exist."""


@dataclass(frozen=True)
class Lesson:
    number: int
    title: str
    notes: Path                # the markdown file
    checkpoints: tuple         # the test files, tests/lessons/test_lesson_NN_*.py

    @property
    def files(self) -> tuple:
        """Everything pytest runs for this lesson: the checkpoint tests, then the notes' doctests."""
        return (*self.checkpoints, self.notes)


@dataclass
class Outcome:
    """What one lesson's checkpoint did in the last run."""

    lesson: Lesson
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    broken: bool = False       # pytest failed in a way no test line explains
    output: str = field(default="", repr=False)  # pytest's whole output for the run this lesson was in

    @property
    def ok(self) -> bool:
        return (self.passed > 0 and not (self.failed or self.errors or self.broken)
                and bool(self.lesson.checkpoints))

    def summary(self) -> str:
        errors = "error" if self.errors == 1 else "errors"
        parts = [f"{self.passed} passed"]
        parts += [f"{n} {word}" for n, word in ((self.failed, "failed"), (self.errors, errors),
                                               (self.skipped, "skipped")) if n]
        if not (self.passed or self.failed or self.errors or self.skipped):
            parts = ["no test ran"]
        return ", ".join(parts)


def find_lessons(root: Path = ROOT) -> list:
    """Every lesson under `root`, by number. A lesson without checkpoint files still counts (and fails)."""
    root = Path(root)
    notes_dir = root / NOTES_DIR
    if not notes_dir.is_dir():
        raise CourseError(f"no {NOTES_DIR}/ folder under {root}: run kuiper from a checkout of the repository")
    lessons = []
    for notes in sorted(notes_dir.glob("*.md")):
        match = _NOTES_NAME.fullmatch(notes.name)
        if match is None:
            continue  # README.md and other pages that are not lessons
        number = int(match.group(1))
        checkpoints = tuple(sorted((root / CHECKPOINT_DIR).glob(f"test_lesson_{number:02d}_*.py")))
        lessons.append(Lesson(number, _title(notes), notes, checkpoints))
    return lessons


def _title(notes: Path) -> str:
    """The first `# ` heading, without a leading "Lesson N:" (the number is shown on its own)."""
    for line in notes.read_text(encoding="utf-8").splitlines():
        match = _HEADING.fullmatch(line)
        if match and not line.startswith("##"):
            return _NUMBERED.sub("", match.group(1)) or match.group(1)
    return notes.stem


def get_lesson(number: int, root: Path = ROOT) -> Lesson:
    lessons = find_lessons(root)
    for lesson in lessons:
        if lesson.number == number:
            return lesson
    known = f"{lessons[0].number}-{lessons[-1].number}" if lessons else "none"
    raise CourseError(f"there is no lesson {number} (lessons: {known}; `kuiper lessons` lists them)")


def pytest_command(files, root: Path = ROOT) -> list:
    """The child process's command line. Options are spelled out rather than taken from setup.cfg's
    addopts, so that the per-test lines this module parses are there whatever the configuration says."""
    return [
        sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-r", "fEsxXp", "--color=no",
        "-p", "no:cacheprovider", "--rootdir", str(root), "--doctest-glob=*.md",
        "--continue-on-collection-errors",  # one lesson that does not import must not hide the others
        *(str(Path(f).relative_to(root)) for f in files),
    ]


def run_lessons(lessons: list, root: Path = ROOT) -> list:
    """Run the checkpoints (and doctests) of `lessons` in one pytest process; one Outcome per lesson."""
    root = Path(root)
    outcomes = {lesson.number: Outcome(lesson) for lesson in lessons}
    owner = {}
    for lesson in lessons:
        for path in lesson.files:
            owner[path.resolve()] = lesson.number
    files = [path for lesson in lessons for path in lesson.files]
    started = time.perf_counter()
    done = subprocess.run(pytest_command(files, root), cwd=root, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    output = done.stdout + done.stderr
    if done.returncode and "No module named pytest" in output:
        raise CourseError("the lessons' checkpoints need pytest: pip install -e \".[dev]\"")

    for line in output.splitlines():
        match = _RESULT_LINE.match(line) or _SKIPPED_LINE.match(line)
        if match is None:
            continue
        word = line.split(" ", 1)[0]
        number = owner.get((root / match.groups()[-1]).resolve())
        if number is not None:
            outcome = outcomes[number]
            key = _OUTCOME_KEY[word]
            setattr(outcome, key, getattr(outcome, key) + 1)
    # pytest failing without naming any test (a usage error, a crash) leaves nothing credited: fail them all
    unexplained = done.returncode not in (0, 5) and not any(o.failed or o.errors for o in outcomes.values())
    for outcome in outcomes.values():
        outcome.seconds = seconds
        outcome.output = output
        outcome.broken = unexplained
    return [outcomes[lesson.number] for lesson in lessons]


def run_lesson(lesson: Lesson, root: Path = ROOT) -> Outcome:
    return run_lessons([lesson], root)[0]


# ---- what the two commands print ----------------------------------------------------------------------------

def print_lessons(run: bool = True, root: Path = ROOT, out=None) -> int:
    """`kuiper lessons`: the table of lessons, with whether each checkpoint passes (when `run`).
    Returns the number of lessons whose checkpoint does not pass."""
    out = out or sys.stdout
    lessons = find_lessons(root)
    if not lessons:
        raise CourseError(f"no lessons found in {Path(root) / NOTES_DIR}")
    outcomes = {}
    if run:
        print("running every checkpoint (this takes a few seconds)...", file=out, flush=True)
        outcomes = {o.lesson.number: o for o in run_lessons(lessons, root)}
    width = max(len(lesson.title) for lesson in lessons)
    for lesson in lessons:
        line = f"{lesson.number:>3}  {lesson.title:<{width}}"
        if run:
            outcome = outcomes[lesson.number]
            verdict = "pass" if outcome.ok else "FAIL"
            line += f"  {verdict}  ({outcome.summary()})"
        print(line.rstrip(), file=out)
    print(f"\nnotes: {Path(root) / NOTES_DIR}/   run one lesson: kuiper lesson N", file=out)
    return sum(not o.ok for o in outcomes.values())


def print_lesson(number: int, root: Path = ROOT, out=None, show_output: bool = False) -> Outcome:
    """`kuiper lesson N`: where the notes are, then the checkpoint's result (pytest's output on failure)."""
    out = out or sys.stdout
    root = Path(root)
    lesson = get_lesson(number, root)
    print(f"Lesson {lesson.number}: {lesson.title}", file=out)
    print(f"  notes:      {lesson.notes.relative_to(root)}", file=out)
    if not lesson.checkpoints:
        print(f"  checkpoint: none found ({CHECKPOINT_DIR / f'test_lesson_{number:02d}_*.py'})", file=out)
    for path in lesson.checkpoints:
        print(f"  checkpoint: {path.relative_to(root)}", file=out)
    print("  running the checkpoint and the notes' examples...", file=out, flush=True)
    outcome = run_lesson(lesson, root)
    if show_output or not outcome.ok:
        print(outcome.output.rstrip(), file=out)
    verdict = "passed" if outcome.ok else "FAILED"
    print(f"Lesson {lesson.number} checkpoint {verdict}: {outcome.summary()} in {outcome.seconds:.1f} s", file=out)
    return outcome
