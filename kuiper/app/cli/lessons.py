"""`kuiper lessons` and `kuiper lesson N`: the course's checkpoints run against your exercises."""

from __future__ import annotations


def add_parser(sub, common, custom) -> None:
    """The lessons and lesson commands."""
    lessons = sub.add_parser("lessons", parents=[common],
                             help="list the course's lessons and how far your exercises pass their checkpoints")
    lessons.add_argument("--no-run", action="store_true", help="only list them, without running the checkpoints")
    lessons.add_argument("--solutions", action="store_true",
                         help="run the checkpoints against the reference solutions instead of exercises/")
    lessons.set_defaults(func=cmd_lessons)

    lesson = sub.add_parser("lesson", parents=[common],
                            help="run one lesson's checkpoint against your exercise (kuiper lesson 3)")
    lesson.add_argument("number", type=int, help="the lesson number")
    lesson.add_argument("--output", action="store_true", help="show pytest's output even when it passes")
    lesson.add_argument("--solutions", action="store_true",
                        help="run the checkpoint against the reference solution instead of exercises/")
    lesson.set_defaults(func=cmd_lesson)


def cmd_lessons(args) -> None:
    """A progress report: it fails only when a checkpoint could not run at all, or, with --solutions, when a
    reference solution does not pass (a checkpoint not passed yet on your own exercises is no error)."""
    from kuiper.app import course

    package = course.SOLUTIONS if args.solutions else course.EXERCISES
    outcomes = course.print_lessons(run=not args.no_run, package=package)
    broken = [o.lesson.number for o in outcomes if o.state == "broken"]
    if broken:
        raise course.CourseError(f"the checkpoints of lessons {broken} did not run: `kuiper lesson N` shows why")
    failing = [o.lesson.number for o in outcomes if not o.ok]
    if args.solutions and failing:
        raise course.CourseError(f"the solutions of lessons {failing} do not pass their checkpoints")


def cmd_lesson(args) -> None:
    from kuiper.app import course

    package = course.SOLUTIONS if args.solutions else course.EXERCISES
    outcome = course.print_lesson(args.number, show_output=args.output, package=package)
    if not outcome.ok:
        raise course.CourseError(f"lesson {args.number}'s checkpoint does not pass yet ({outcome.summary()})")
