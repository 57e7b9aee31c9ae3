"""Lesson 10: Build. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 10`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""


def lifetimes(steps) -> dict:
    """{operand: (first, last)} for a list of steps [(operands written, operands read), ...] in execution
    order: `first` the step that writes the operand, `last` the last step that reads it (its own step when
    nothing does). Operands only read (the graph's inputs) are left out. See course_notes/10-build.md,
    "Step 6b: memory planning by liveness"."""
    raise NotImplementedError('lesson 10: write lifetimes() in exercises/lesson_10.py; '
                              'see course_notes/10-build.md, "Step 6b: memory planning by liveness"')


def assign_slots(lives: dict) -> dict:
    """{operand: slot number} for lifetimes {operand: (first, last)} (steps inclusive): two operands share a
    slot only if one's last step comes before the other's first, and no assignment uses fewer slots.
    See course_notes/10-build.md, exercise 3."""
    raise NotImplementedError('lesson 10: write assign_slots() in exercises/lesson_10.py; '
                              'see course_notes/10-build.md, exercise 3')
