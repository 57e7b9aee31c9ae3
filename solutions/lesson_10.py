"""Lesson 10: Build. Reference solutions."""


def lifetimes(steps) -> dict:
    """{operand: (first, last)} for a list of steps [(operands written, operands read), ...] in execution
    order: `first` the step that writes the operand, `last` the last step that reads it (its own step when
    nothing does). Operands only read (the graph's inputs) are left out. See course_notes/10-build.md,
    "Step 6b: memory planning by liveness"."""
    result = {}
    for step, (written, read) in enumerate(steps):
        for name in read:
            if name in result:
                result[name] = (result[name][0], step)
        for name in written:
            result[name] = (step, step)
    return result


def assign_slots(lives: dict) -> dict:
    """{operand: slot number} for lifetimes {operand: (first, last)} (steps inclusive): two operands share a
    slot only if one's last step comes before the other's first, and no assignment uses fewer slots.
    See course_notes/10-build.md, exercise 3."""
    slot_of, free, busy_until, count = {}, [], {}, 0
    for name, (first, last) in sorted(lives.items(), key=lambda item: item[1]):
        for slot, until in list(busy_until.items()):
            if until < first:
                free.append(slot)
                del busy_until[slot]
        if free:
            free.sort()
            slot = free.pop(0)
        else:
            slot, count = count, count + 1
        slot_of[name] = slot
        busy_until[slot] = last
    return slot_of
