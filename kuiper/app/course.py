"""The course runner behind `kuiper lessons` and `kuiper lesson N`.

A lesson is three files that share its number:

* the notes, `course_notes/NN-short-title.md` (the title is the first `#` heading);
* the exercise, `exercises/lesson_NN.py`: functions and classes the student writes. As shipped, each one only
  raises NotImplementedError with a message that names the lesson, what to write and where the notes say how;
* the checkpoint, `tests/lessons/checkpoint_NN_*.py`: tests that call the exercise and hold what it returns
  to kuiper's own implementation, to numpy, or to the outputs PyTorch saved in models/.

The reference solutions, `solutions/lesson_NN.py`, have the same names. The checkpoint imports the package
that the environment variable KUIPER_EXERCISES names: `exercises` (the default, the student's code) or
`solutions` (what CI runs, `kuiper lesson N --solutions`).

Running lessons runs pytest in one child process on their checkpoint files, with this module loaded as a
pytest plugin (`-p kuiper.app.course`): it writes one JSON line per test result to the file that
KUIPER_COURSE_REPORT names, and each line is credited to the lesson whose checkpoint file it names. A
failure whose error is a NotImplementedError is an exercise still to write, and its message says which.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kuiper.core.errors import KuiperError

ROOT = Path(__file__).resolve().parents[2]  # the checkout
NOTES_DIR = "course_notes"
CHECKPOINT_DIR = Path("tests") / "lessons"
EXERCISES = "exercises"          # the student's package
SOLUTIONS = "solutions"          # the reference solutions, same names
PACKAGE_ENV = "KUIPER_EXERCISES"
REPORT_ENV = "KUIPER_COURSE_REPORT"

_NOTES_NAME = re.compile(r"(\d{2})-[A-Za-z0-9_-]+\.md")
_HEADING = re.compile(r"#\s+(.+?)\s*#*\s*$")
_NUMBERED = re.compile(r"^Lesson\s+\d+\s*[:.-]\s*", re.I)
_TODO = "NotImplementedError"


class CourseError(KuiperError):
    """The course is not where it should be, or a lesson number does not exist."""


@dataclass(frozen=True)
class Lesson:
    number: int
    title: str
    notes: Path                # the markdown file
    checkpoints: tuple         # the checkpoint files, tests/lessons/checkpoint_NN_*.py
    root: Path = ROOT

    def exercise(self, package: str = EXERCISES) -> Path:
        """The module the student writes (or, with package="solutions", its solution)."""
        return self.root / package / f"lesson_{self.number:02d}.py"


@dataclass(frozen=True)
class Result:
    """One test of a checkpoint, as the plugin reported it."""

    nodeid: str
    outcome: str               # "passed", "failed", "error" (setup or import) or "skipped"
    message: str = ""          # the exception's one-line message, for a failure
    details: str = field(default="", repr=False)   # pytest's report of a failure

    @property
    def test(self) -> str:
        """The test function, without the file and the parameters of one case."""
        return self.nodeid.split("::")[-1].split("[")[0] if "::" in self.nodeid else self.nodeid

    @property
    def todo(self) -> bool:
        """A stub still raising: an exercise to write, not a bug."""
        return self.outcome in ("failed", "error") and self.message.startswith(_TODO)


@dataclass
class Outcome:
    """What one lesson's checkpoint did in the last run."""

    lesson: Lesson
    results: list = field(default_factory=list)
    seconds: float = 0.0
    broken: bool = False       # pytest failed in a way no test result explains
    output: str = field(default="", repr=False)  # pytest's whole output for the run this lesson was in

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.results)

    passed = property(lambda self: self.count("passed"))
    failed = property(lambda self: self.count("failed"))
    errors = property(lambda self: self.count("error"))
    skipped = property(lambda self: self.count("skipped"))

    @property
    def ok(self) -> bool:
        return (self.passed > 0 and not (self.failed or self.errors or self.broken)
                and bool(self.lesson.checkpoints))

    @property
    def todo(self) -> list:
        """The distinct messages of the stubs that still raise, in the order the tests met them."""
        return list(dict.fromkeys(_first_line(r.message[len(_TODO) + 1:].strip())
                                  for r in self.results if r.todo))

    @property
    def state(self) -> str:
        """"passed", "not yet" (no test passes), "partly" (some do), or "broken" (nothing ran)."""
        if self.ok:
            return "passed"
        if self.broken or not self.results:
            return "broken"
        return "partly" if self.passed else "not yet"

    def summary(self) -> str:
        errors = "error" if self.errors == 1 else "errors"
        parts = [f"{self.passed} passed"]
        parts += [f"{n} {word}" for n, word in ((self.failed, "failed"), (self.errors, errors),
                                               (self.skipped, "skipped")) if n]
        if not self.results:
            parts = ["no test ran"]
        return ", ".join(parts)

    def by_test(self) -> list:
        """[(test function, [results of its cases])] in the order the tests ran."""
        groups = {}
        for result in self.results:
            groups.setdefault(result.test, []).append(result)
        return list(groups.items())


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def unwritten(path: Path) -> list:
    """[(name, message)] for each function or method of the module at `path` that is still a stub: its last
    statement raises NotImplementedError. Read from the source, so that a lesson can list every exercise left,
    also those that no test reached yet; a file that does not parse lists nothing."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    found = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                last = node.body[-1]
                call = last.exc if isinstance(last, ast.Raise) else None
                name = getattr(call.func if isinstance(call, ast.Call) else call, "id", None)
                if name == _TODO:
                    args = call.args if isinstance(call, ast.Call) else []
                    message = args[0].value if args and isinstance(args[0], ast.Constant) else ""
                    found.append((f"{prefix}{node.name}", str(message)))

    visit(tree.body, "")
    return found


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
            continue  # README.md, the appendix and other pages that are not lessons
        number = int(match.group(1))
        checkpoints = tuple(sorted((root / CHECKPOINT_DIR).glob(f"checkpoint_{number:02d}_*.py")))
        lessons.append(Lesson(number, _title(notes), notes, checkpoints, root))
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


def checkpoint_command(files, root: Path = ROOT, traceback: str = "short") -> list:
    """The child process's command line. Options are spelled out rather than taken from setup.cfg's
    addopts, and the results come from this module as a plugin, whatever the configuration says.
    `traceback` is pytest's --tb: "no" where nobody reads the report (it is faster)."""
    return [
        sys.executable, "-m", "pytest", "-q", "-o", "addopts=", f"--tb={traceback}", "--color=no",
        "-p", "no:cacheprovider", "-p", "kuiper.app.course", "--rootdir", str(root),
        "--continue-on-collection-errors",  # one lesson that does not import must not hide the others
        *(str(Path(f).relative_to(root)) for f in files),
    ]


def child_environment(root: Path, package: str, report: Path) -> dict:
    """The environment of the child pytest: the package to test, where to report, and a PYTHONPATH that
    finds the course's packages (under `root`) and this kuiper, before anything inherited."""
    env = dict(os.environ)
    paths = [str(root), str(Path(__file__).resolve().parents[2])]
    paths += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in paths]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env[PACKAGE_ENV] = package
    env[REPORT_ENV] = str(report)
    return env


def run_lessons(lessons: list, root: Path = ROOT, package: str = EXERCISES, traceback: str = "short") -> list:
    """Run the checkpoints of `lessons` against `package` in one pytest process; one Outcome per lesson."""
    root = Path(root)
    outcomes = {lesson.number: Outcome(lesson) for lesson in lessons}
    owner = {path.resolve(): lesson.number for lesson in lessons for path in lesson.checkpoints}
    files = [path for lesson in lessons for path in lesson.checkpoints]
    if not files:
        return list(outcomes.values())
    with tempfile.TemporaryDirectory(prefix="kuiper-course-") as folder:
        report = Path(folder) / "results.jsonl"
        started = time.perf_counter()
        done = subprocess.run(checkpoint_command(files, root, traceback), cwd=root, capture_output=True, text=True,
                              env=child_environment(root, package, report))
        seconds = time.perf_counter() - started
        lines = report.read_text().splitlines() if report.exists() else []
    output = done.stdout + done.stderr
    if done.returncode and "No module named pytest" in output:
        raise CourseError("the lessons' checkpoints need pytest: pip install -e \".[dev]\"")

    for line in lines:
        entry = json.loads(line)
        number = owner.get((root / entry["nodeid"].split("::")[0]).resolve())
        if number is not None:
            outcomes[number].results.append(Result(entry["nodeid"], entry["outcome"], entry["message"],
                                                   entry.get("details", "")))
    # pytest failing without naming any test (a usage error, a crash) leaves nothing credited: fail them all
    unexplained = done.returncode not in (0, 1, 5) or (
        done.returncode == 1 and not any(o.failed or o.errors for o in outcomes.values()))
    for outcome in outcomes.values():
        outcome.seconds = seconds
        outcome.output = output
        outcome.broken = unexplained
    return [outcomes[lesson.number] for lesson in lessons]


def run_lesson(lesson: Lesson, root: Path = ROOT, package: str = EXERCISES) -> Outcome:
    return run_lessons([lesson], root, package)[0]


# ---- the pytest plugin (loaded in the child with -p kuiper.app.course) --------------------------------------------

def _report(nodeid: str, outcome: str, longrepr) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    crash = getattr(longrepr, "reprcrash", None)
    details = str(longrepr) if longrepr is not None and outcome != "skipped" else ""
    message = crash.message if crash is not None else _first_line(details)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"nodeid": nodeid, "outcome": outcome, "message": message, "details": details}) + "\n")


def pytest_runtest_logreport(report) -> None:
    """One line per test: its call's outcome, or its setup's when the setup failed or skipped it."""
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "error" if report.when == "setup" and report.failed else report.outcome
        _report(report.nodeid, outcome, report.longrepr)
    elif report.when == "teardown" and report.failed:
        _report(report.nodeid, "error", report.longrepr)


def pytest_collectreport(report) -> None:
    """A checkpoint file that does not import (a syntax error in an exercise, say) is one error."""
    if report.failed:
        _report(report.nodeid, "error", report.longrepr)


# ---- what the two commands print ----------------------------------------------------------------------------

def _relative(path: Path, root: Path) -> str:
    return str(Path(path).relative_to(root))


def print_lessons(run: bool = True, root: Path = ROOT, out=None, package: str = EXERCISES) -> list:
    """`kuiper lessons`: the table of lessons, with the state of each checkpoint for `package` (when `run`).
    Returns the outcomes (empty without `run`)."""
    out = out or sys.stdout
    root = Path(root)
    lessons = find_lessons(root)
    if not lessons:
        raise CourseError(f"no lessons found in {root / NOTES_DIR}")
    outcomes = {}
    if run:
        print(f"running every checkpoint against {package}/ ...", file=out, flush=True)
        outcomes = {o.lesson.number: o for o in run_lessons(lessons, root, package, traceback="no")}
    width = max(len(lesson.title) for lesson in lessons)
    for lesson in lessons:
        line = f"{lesson.number:>3}  {lesson.title:<{width}}"
        if run:
            outcome = outcomes[lesson.number]
            total = len(outcome.results)
            line += f"  {outcome.state:<8} ({outcome.passed} of {total} tests pass)"
        print(line.rstrip(), file=out)
    if run:
        done = sum(o.ok for o in outcomes.values())
        seconds = next(iter(outcomes.values())).seconds
        print(f"\n{done} of {len(lessons)} lessons passed ({seconds:.0f} s).", file=out)
        following = next((o.lesson for o in outcomes.values() if not o.ok), None)
        if following is not None:
            print(f"next: {_relative(following.notes, root)}, then `kuiper lesson {following.number}`", file=out)
    else:
        print(f"\nnotes: {root / NOTES_DIR}/   exercises: {root / EXERCISES}/   run one lesson: kuiper lesson N",
              file=out)
    return list(outcomes.values())


def print_lesson(number: int, root: Path = ROOT, out=None, show_output: bool = False,
                 package: str = EXERCISES) -> Outcome:
    """`kuiper lesson N`: where the files are, each checkpoint test's result, the exercises still to write,
    and pytest's report when a test fails for another reason than a stub."""
    out = out or sys.stdout
    root = Path(root)
    lesson = get_lesson(number, root)
    print(f"Lesson {lesson.number}: {lesson.title}", file=out)
    print(f"  notes:      {_relative(lesson.notes, root)}", file=out)
    exercise = lesson.exercise(package)
    mine = "your code" if package == EXERCISES else "the reference solution"
    print(f"  exercise:   {_relative(exercise, root)} ({mine}"
          f"{'' if exercise.exists() else ', missing'})", file=out)
    if not lesson.checkpoints:
        print(f"  checkpoint: none found ({CHECKPOINT_DIR / f'checkpoint_{number:02d}_*.py'})", file=out)
    for path in lesson.checkpoints:
        print(f"  checkpoint: {_relative(path, root)}", file=out)
    print(f"  running the checkpoint against {package}/ ...", file=out, flush=True)
    outcome = run_lesson(lesson, root, package)

    for test, results in outcome.by_test():
        passed = sum(r.outcome == "passed" for r in results)
        verdict = "pass" if passed == len(results) else "FAIL" if any(
            r.outcome in ("failed", "error") for r in results) else "skip"
        cases = f" ({passed} of {len(results)} cases)" if len(results) > 1 else ""
        why = next((r for r in results if r.outcome in ("failed", "error")), None)
        reason = ""
        if why is not None:
            reason = "  not written yet" if why.todo else f"  {_first_line(why.message)[:100]}"
        print(f"  {verdict:4}  {test}{cases}{reason}", file=out)

    bugs = [r for r in outcome.results if r.outcome in ("failed", "error") and not r.todo]
    if show_output or outcome.broken:
        print(outcome.output.rstrip(), file=out)
    elif bugs:
        shown = 3
        for result in bugs[:shown]:
            print(f"\n---- {result.nodeid}\n{result.details.rstrip()}", file=out)
        if len(bugs) > shown:
            print(f"\n... and {len(bugs) - shown} more (`kuiper lesson {number} --output` shows all)", file=out)
    todo = [message or name for name, message in unwritten(exercise)] if not outcome.ok else []
    todo += [message for message in outcome.todo if message not in todo]
    if todo:
        print(f"\nto write in {_relative(exercise, root)}:", file=out)
        for message in todo:
            print(f"  - {message}", file=out)

    print(file=out)
    if outcome.ok:
        print(f"Lesson {lesson.number} checkpoint passed: {outcome.summary()} in {outcome.seconds:.1f} s", file=out)
        following = next((l for l in find_lessons(root) if l.number > lesson.number), None)
        if following is not None:
            print(f"next: {_relative(following.notes, root)}", file=out)
    else:
        print(f"Lesson {lesson.number} checkpoint not passed yet: {outcome.summary()} in {outcome.seconds:.1f} s",
              file=out)
        if bugs:
            print(f"pytest's report above shows what your code in {_relative(exercise, root)} got wrong", file=out)
        if todo:
            print(f"write the exercises listed above, then run `kuiper lesson {lesson.number}` again", file=out)
    out.flush()
    return outcome
