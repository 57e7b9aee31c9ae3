"""Lesson 9: Expressions. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 9`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

from kuiper.layers.expression_parser import Apply, Call


def to_rpn(tree) -> list:
    """The reverse Polish form of an expression tree (what kuiper.layers.expression_parser.parse returns):
    the same list of Operand, Literal and Apply(name, arity) items as kuiper's to_rpn, but computed without
    recursion, with an explicit stack of nodes. See course_notes/09-expressions.md, exercise 3."""
    raise NotImplementedError('lesson 9: write to_rpn() in exercises/lesson_09.py; '
                              'see course_notes/09-expressions.md, exercise 3')


def to_infix(tree) -> str:
    """The expression as infix text that Python can evaluate: add, sub, mul and div as `+ - * /` with every
    operation in parentheses, "(@0 * @1) + @2"; any other function as a call "exp(@0)", "max(@0, 1)";
    operands as "@k", constants as their value. See course_notes/09-expressions.md, exercise 2."""
    raise NotImplementedError('lesson 9: write to_infix() in exercises/lesson_09.py; '
                              'see course_notes/09-expressions.md, exercise 2')
