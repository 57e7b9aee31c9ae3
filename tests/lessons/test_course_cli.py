"""The course: its files fit together, every checkpoint passes on the reference solutions and fails on the
stubs, and the runner (kuiper/app/course.py) behind `kuiper lessons` / `kuiper lesson N` reports what it should."""

import ast
import io
import os
import re

import pytest

from kuiper.app import course
from lesson_tools import ROOT, check_commands, commands_in, run_cli

# the notes files on disk, counted independently of course.py's own pattern
NUMBERS = sorted(int(path.name[:2]) for path in (ROOT / "course_notes").glob("[0-9][0-9]-*.md"))
LESSONS = course.find_lessons(ROOT)


def definitions(path) -> dict:
    """{qualified name: (signature, docstring)} of the functions, classes and methods a module defines."""
    found = {}

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                signature = ast.unparse(node.args) if isinstance(node, ast.FunctionDef) else \
                    [ast.unparse(d) for d in node.decorator_list] + [ast.unparse(b) for b in node.bases]
                found[prefix + node.name] = (signature, ast.get_docstring(node))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef) and node.name == "__init__":
                found[prefix + node.name] = (ast.unparse(node.args), ast.get_docstring(node))

    visit(ast.parse(path.read_text()).body, "")
    return found


def test_every_lesson_has_notes_an_exercise_a_solution_and_a_checkpoint():
    assert NUMBERS == list(range(1, len(NUMBERS) + 1)) and len(NUMBERS) >= 20  # numbered without gaps
    assert [lesson.number for lesson in LESSONS] == NUMBERS
    for lesson in LESSONS:
        first_heading = next(line for line in lesson.notes.read_text().splitlines() if line.startswith("# "))
        assert first_heading == f"# Lesson {lesson.number}: {lesson.title}"
        assert len(lesson.checkpoints) == 1
        assert lesson.checkpoints[0].name.startswith(f"checkpoint_{lesson.number:02d}_")
        assert lesson.exercise().is_file() and lesson.exercise(course.SOLUTIONS).is_file()
        assert course.unwritten(lesson.exercise(course.SOLUTIONS)) == []
        topic = lesson.checkpoints[0].name[len("checkpoint_NN_"):]
        assert (ROOT / "tests" / "lessons" / f"test_notes_{lesson.number:02d}_{topic}").is_file()


def test_the_notes_name_the_exercise_and_the_command():
    for lesson in LESSONS:
        text = lesson.notes.read_text()
        section = text[text.index("## Checkpoint"):]
        assert f"`exercises/lesson_{lesson.number:02d}.py`" in section, lesson.notes.name
        assert f"kuiper lesson {lesson.number}\n" in section, lesson.notes.name
        for name in definitions(lesson.exercise(course.SOLUTIONS)):
            if not name.endswith("__init__"):
                assert f"`{name.split('.')[-1]}" in text, f"{lesson.notes.name} does not name `{name}`"


def test_stubs_and_solutions_have_the_same_names_signatures_and_docstrings():
    for lesson in LESSONS:
        stubs, solutions = definitions(lesson.exercise()), definitions(lesson.exercise(course.SOLUTIONS))
        assert stubs and stubs.keys() == solutions.keys(), lesson.number
        if not pure_stubs(lesson):
            continue  # a student's own code: the names must stay, the rest is theirs
        assert stubs == solutions, lesson.number
        for name, message in course.unwritten(lesson.exercise()):
            assert message.startswith(f"lesson {lesson.number}: write {name}() in exercises/lesson_"), message
            assert re.search(r"see course_notes/\d\d-[\w-]+\.md", message), message


def test_no_checkpoint_holds_its_answer():
    """A checkpoint compares with kuiper, numpy or PyTorch's outputs; it defines nothing the exercise asks for
    and never imports the solutions."""
    for lesson in LESSONS:
        asked = {name.split(".")[0] for name in definitions(lesson.exercise(course.SOLUTIONS))}
        source = lesson.checkpoints[0].read_text()
        defined = {node.name for node in ast.walk(ast.parse(source))
                   if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        assert not asked & defined, (lesson.number, asked & defined)
        assert "solutions" not in re.findall(r"^\s*(?:from|import)\s+(\w+)", source, re.M)


def pure_stubs(lesson) -> bool:
    """Whether every function and method of the lesson's exercise module is still the stub that ships."""
    functions = set()

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef):
                functions.add(prefix + node.name)

    visit(ast.parse(lesson.exercise().read_text()).body, "")
    return bool(functions) and functions == {name for name, _ in course.unwritten(lesson.exercise())}


@pytest.fixture(scope="module")
def on_solutions():
    return course.run_lessons(LESSONS, ROOT, course.SOLUTIONS, traceback="short")


@pytest.fixture(scope="module")
def on_stubs():
    return course.run_lessons(LESSONS, ROOT, course.EXERCISES, traceback="no")


def test_every_checkpoint_passes_on_the_solutions(on_solutions):
    failing = {o.lesson.number: o.summary() for o in on_solutions if not o.ok}
    assert not failing, f"{failing}\n{on_solutions[0].output[-6000:]}"
    assert all(o.passed >= 3 for o in on_solutions)


def test_every_checkpoint_fails_on_the_stubs(on_stubs):
    """Each test of each checkpoint fails on the stubs as shipped, with the stub's own message: no checkpoint
    passes before the student has written the exercise. A lesson whose exercise holds a student's code is left
    out, unless CI runs (it checks the stubs as committed)."""
    checked = 0
    for outcome in on_stubs:
        if not (pure_stubs(outcome.lesson) or os.environ.get("CI")):
            continue
        assert outcome.results and outcome.state == "not yet", (outcome.lesson.number, outcome.summary())
        for result in outcome.results:
            assert result.outcome == "failed" and result.todo, (outcome.lesson.number, result)
            assert f"lesson {outcome.lesson.number}: write " in result.message, result
        checked += 1
    if not checked:
        pytest.skip("every exercise module holds your own code")


def test_the_course_readme_links_every_lesson_and_its_commands_work(capsys):
    index = (ROOT / "course_notes" / "README.md").read_text()
    for lesson in LESSONS:
        assert f"]({lesson.notes.name})" in index
        assert f"`exercises/lesson_{lesson.number:02d}.py`" in index
    commands = commands_in(index)
    assert "kuiper lessons" in commands and "kuiper lesson 3" in commands
    check_commands(commands, capsys, "course_notes/README.md")


def test_kuiper_lesson_with_an_unknown_number_is_an_error(capsys):
    status, out, err = run_cli(["lesson", "99"], capsys)
    assert status == 1
    assert f"there is no lesson 99 (lessons: 1-{NUMBERS[-1]}" in err


def test_kuiper_lessons_lists_without_running(capsys):
    status, out, _ = run_cli(["lessons", "--no-run"], capsys)
    assert status == 0
    for lesson in LESSONS:
        assert re.search(rf"^\s*{lesson.number}\s+{re.escape(lesson.title)}\s*$", out, re.M)


# ---- the runner on a throwaway course ------------------------------------------------------------------------

EXERCISE = '''
def double(x):
    """Return 2 x. See course_notes/01-topic.md, exercise 1."""
    raise NotImplementedError("lesson 1: write double() in exercises/lesson_01.py; see course_notes/01-topic.md")


def triple(x):
    """Return 3 x. See course_notes/01-topic.md, exercise 2."""
    raise NotImplementedError("lesson 1: write triple() in exercises/lesson_01.py; see course_notes/01-topic.md")
'''
SOLUTION = '''
def double(x):
    return 2 * x


def triple(x):
    return 3 * x
'''
CHECKPOINT = '''
import importlib, os
ex = importlib.import_module(os.environ["KUIPER_EXERCISES"] + ".lesson_01")

def test_double():
    assert ex.double(4) == 8

def test_triple():
    for x in (1, 2):
        assert ex.triple(x) == 3 * x
'''


def make_course(root, lessons):
    """A throwaway course: {number: (title, checkpoint source or None, exercise source, solution source)}."""
    for folder in ("course_notes", "tests/lessons", "exercises", "solutions"):
        (root / folder).mkdir(parents=True)
    (root / "exercises" / "__init__.py").write_text("")
    (root / "solutions" / "__init__.py").write_text("")
    for number, (title, checkpoint, exercise, solution) in lessons.items():
        (root / "course_notes" / f"{number:02d}-topic.md").write_text(f"# Lesson {number}: {title}\n")
        if checkpoint is not None:
            (root / "tests" / "lessons" / f"checkpoint_{number:02d}_topic.py").write_text(checkpoint)
        (root / "exercises" / f"lesson_{number:02d}.py").write_text(exercise)
        (root / "solutions" / f"lesson_{number:02d}.py").write_text(solution)
    (root / "course_notes" / "README.md").write_text("# index, not a lesson\n")
    (root / "course_notes" / "appendix-measurements.md").write_text("# not a lesson either\n")


def test_runner_states_and_guidance(tmp_path):
    half = SOLUTION.replace("return 3 * x", "return 3 * x if x == 1 else 0")
    make_course(tmp_path, {
        1: ("Stubs", CHECKPOINT, EXERCISE, SOLUTION),
        2: ("Half done", CHECKPOINT.replace("lesson_01", "lesson_02"), half, SOLUTION),
        3: ("Broken import", "import no_such_module_anywhere\n", EXERCISE, SOLUTION),
        4: ("No checkpoint", None, EXERCISE, SOLUTION),
    })
    lessons = course.find_lessons(tmp_path)
    assert [(l.number, l.title) for l in lessons] == [(1, "Stubs"), (2, "Half done"), (3, "Broken import"),
                                                      (4, "No checkpoint")]
    outcomes = {o.lesson.number: o for o in course.run_lessons(lessons, tmp_path)}
    assert (outcomes[1].passed, outcomes[1].failed, outcomes[1].state) == (0, 2, "not yet")
    assert outcomes[1].todo == ["lesson 1: write double() in exercises/lesson_01.py; see course_notes/01-topic.md",
                                "lesson 1: write triple() in exercises/lesson_01.py; see course_notes/01-topic.md"]
    assert (outcomes[2].passed, outcomes[2].failed, outcomes[2].state, outcomes[2].todo) == (1, 1, "partly", [])
    assert outcomes[3].errors == 1 and outcomes[3].state == "not yet"
    assert outcomes[4].results == [] and not outcomes[4].ok
    assert outcomes[2].summary() == "1 passed, 1 failed"

    solved = course.run_lessons(lessons, tmp_path, course.SOLUTIONS)
    assert [o.state for o in solved] == ["passed", "passed", "not yet", "broken"]

    out = io.StringIO()
    course.print_lessons(root=tmp_path, out=out)
    lines = out.getvalue().splitlines()
    assert re.search(r"^\s*1\s+Stubs\s+not yet\s+\(0 of 2 tests pass\)$", lines[1])
    assert re.search(r"^\s*2\s+Half done\s+partly\s+\(1 of 2 tests pass\)$", lines[2])
    assert "0 of 4 lessons passed" in out.getvalue()


def test_kuiper_lesson_on_stubs_says_what_to_write(tmp_path):
    make_course(tmp_path, {1: ("Stubs", CHECKPOINT, EXERCISE, SOLUTION),
                           2: ("Next", CHECKPOINT, EXERCISE, SOLUTION)})
    out = io.StringIO()
    outcome = course.print_lesson(1, root=tmp_path, out=out)
    text = out.getvalue()
    assert not outcome.ok
    assert "exercise:   exercises/lesson_01.py (your code)" in text
    assert re.search(r"FAIL\s+test_double\s+not written yet", text)
    assert "to write in exercises/lesson_01.py:\n  - lesson 1: write double() in" in text
    assert "Traceback" not in text and "assert" not in text  # a stub is no bug: no report
    assert "Lesson 1 checkpoint not passed yet: 0 passed, 2 failed" in text

    out = io.StringIO()
    assert course.print_lesson(1, root=tmp_path, out=out, package=course.SOLUTIONS).ok
    assert "Lesson 1 checkpoint passed: 2 passed" in out.getvalue()
    assert "next: course_notes/02-topic.md" in out.getvalue()


def test_kuiper_lesson_shows_pytests_report_for_a_wrong_answer(tmp_path):
    wrong = SOLUTION.replace("return 2 * x", "return 40 + 2")
    make_course(tmp_path, {1: ("Wrong", CHECKPOINT, wrong, SOLUTION)})
    out = io.StringIO()
    outcome = course.print_lesson(1, root=tmp_path, out=out)
    text = out.getvalue()
    assert (outcome.passed, outcome.failed) == (1, 1)
    assert re.search(r"FAIL\s+test_double\s+assert 42 == 8", text)
    assert "assert 42 == 8" in text and "to write in" not in text
    assert "pytest's report above shows what your code in exercises/lesson_01.py got wrong" in text
    with pytest.raises(course.CourseError, match="no lesson 5"):
        course.print_lesson(5, root=tmp_path, out=out)
