"""The course runner (kuiper/course.py) and the `kuiper lessons` / `kuiper lesson N` commands."""

import io
import re

import pytest

from kuiper import course
from lesson_tools import ROOT, check_commands, commands_in, run_cli

# the notes files on disk, counted independently of course.py's own pattern
NUMBERS = sorted(int(path.name[:2]) for path in (ROOT / "course_notes").glob("[0-9][0-9]-*.md"))


def test_every_lesson_is_found_with_its_title_and_checkpoint():
    lessons = course.find_lessons(ROOT)
    assert NUMBERS == list(range(1, len(NUMBERS) + 1)) and len(NUMBERS) >= 16  # numbered without gaps
    assert [lesson.number for lesson in lessons] == NUMBERS
    for lesson in lessons:
        first_heading = next(line for line in lesson.notes.read_text().splitlines() if line.startswith("# "))
        assert first_heading == f"# Lesson {lesson.number}: {lesson.title}"
        assert len(lesson.checkpoints) == 1
        assert lesson.checkpoints[0].name.startswith(f"test_lesson_{lesson.number:02d}_")
        # the notes' Checkpoint section names the command and the file
        text = lesson.notes.read_text()
        assert "## Checkpoint" in text
        assert f"kuiper lesson {lesson.number}\n" in text
        assert f"python -m pytest tests/lessons/{lesson.checkpoints[0].name}" in text


def test_course_readme_links_every_lesson_and_its_commands_work(capsys):
    index = (ROOT / "course_notes" / "README.md").read_text()
    for lesson in course.find_lessons(ROOT):
        assert f"]({lesson.notes.name})" in index
        assert lesson.checkpoints[0].name in index
    commands = commands_in(index)
    assert "kuiper lessons" in commands and "kuiper lesson 3" in commands
    check_commands(commands, capsys, "course_notes/README.md")


def test_kuiper_lesson_runs_a_real_checkpoint(capsys):
    status, out, err = run_cli(["lesson", "2"], capsys)
    assert status == 0, out + err
    assert "Lesson 2: Tensors: layout, views, padding, broadcasting" in out
    assert "notes:      course_notes/02-tensor.md" in out
    assert "checkpoint: tests/lessons/test_lesson_02_tensor.py" in out
    summary = re.search(r"Lesson 2 checkpoint passed: (\d+) passed", out)
    assert summary and int(summary.group(1)) >= 10  # the checkpoint's tests plus the notes' doctest


def test_kuiper_lesson_with_an_unknown_number_is_an_error(capsys):
    status, out, err = run_cli(["lesson", "99"], capsys)
    assert status == 1
    assert f"there is no lesson 99 (lessons: 1-{NUMBERS[-1]}" in err


def test_kuiper_lessons_lists_without_running(capsys):
    status, out, _ = run_cli(["lessons", "--no-run"], capsys)
    assert status == 0
    for lesson in course.find_lessons(ROOT):
        assert re.search(rf"^\s*{lesson.number}\s+{re.escape(lesson.title)}\s*$", out, re.M)


def make_course(root, lessons):
    """A throwaway course: {number: (title, test source or None)}."""
    (root / "course_notes").mkdir()
    (root / "tests" / "lessons").mkdir(parents=True)
    for number, (title, test_source) in lessons.items():
        notes = root / "course_notes" / f"{number:02d}-topic.md"
        notes.write_text(f"# {title}\n\n```python\n>>> 1 + {number}\n{1 + number}\n\n```\n")
        if test_source is not None:
            (root / "tests" / "lessons" / f"test_lesson_{number:02d}_topic.py").write_text(test_source)
    (root / "course_notes" / "README.md").write_text("# index, not a lesson\n")


def test_runner_credits_passes_and_failures_to_the_right_lesson(tmp_path):
    make_course(tmp_path, {
        1: ("Passing", "def test_a():\n    assert True\n\ndef test_b():\n    assert 2 == 2\n"),
        2: ("Failing", "def test_a():\n    assert True\n\ndef test_b():\n    assert 1 == 2\n"),
        3: ("Broken import", "import no_such_module_anywhere\n"),
        4: ("No checkpoint", None),
    })
    lessons = course.find_lessons(tmp_path)
    assert [(l.number, l.title) for l in lessons] == [(1, "Passing"), (2, "Failing"), (3, "Broken import"),
                                                      (4, "No checkpoint")]
    outcomes = {o.lesson.number: o for o in course.run_lessons(lessons, tmp_path)}
    assert (outcomes[1].passed, outcomes[1].failed, outcomes[1].ok) == (3, 0, True)  # 2 tests + 1 doctest
    assert (outcomes[2].passed, outcomes[2].failed, outcomes[2].ok) == (2, 1, False)
    assert outcomes[3].errors == 1 and not outcomes[3].ok
    assert outcomes[4].passed == 1 and not outcomes[4].ok  # a doctest alone is not a checkpoint
    assert outcomes[2].summary() == "2 passed, 1 failed"

    out = io.StringIO()
    failing = course.print_lessons(root=tmp_path, out=out)
    assert failing == 3
    lines = out.getvalue().splitlines()
    assert re.search(r"^\s*1\s+Passing\s+pass\s+\(3 passed\)$", lines[1])
    assert re.search(r"^\s*2\s+Failing\s+FAIL\s+\(2 passed, 1 failed\)$", lines[2])
    assert re.search(r"^\s*3\s+Broken import\s+FAIL\s+\(1 passed, 1 error\)$", lines[3])


def test_print_lesson_shows_pytest_output_when_it_fails(tmp_path):
    make_course(tmp_path, {1: ("Failing", "def test_x():\n    assert 40 + 2 == 43\n")})
    out = io.StringIO()
    outcome = course.print_lesson(1, root=tmp_path, out=out)
    assert not outcome.ok
    text = out.getvalue()
    assert "assert (40 + 2) == 43" in text  # pytest's report of the failing line
    assert "Lesson 1 checkpoint FAILED: 1 passed, 1 failed" in text
    with pytest.raises(course.CourseError, match="no lesson 5"):
        course.print_lesson(5, root=tmp_path, out=out)
