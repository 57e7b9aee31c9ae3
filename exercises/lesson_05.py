"""Lesson 5: From records to a RuntimeGraph. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 5`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""


def successors(records) -> dict:
    """{operator name: [names of its successors]} for the records `kuiper.pnnx.parse_param` returns: the
    operators that consume any of its outputs, each listed once, in order of first use (for each output
    operand in turn, its consumers in order). See course_notes/05-runtime-graph.md, "The runtime records"."""
    raise NotImplementedError('lesson 5: write successors() in exercises/lesson_05.py; '
                              'see course_notes/05-runtime-graph.md, "The runtime records"')


def shared_operands(records) -> list:
    """The names of the operands read in more than one input slot (by two operators, or twice by one), in
    the order of records.operands. See course_notes/05-runtime-graph.md, exercise 1."""
    raise NotImplementedError('lesson 5: write shared_operands() in exercises/lesson_05.py; '
                              'see course_notes/05-runtime-graph.md, exercise 1')
