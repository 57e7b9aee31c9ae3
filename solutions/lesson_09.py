"""Lesson 9: Expressions. Reference solutions."""

from kuiper.layers.expression_parser import Apply, Call

INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def to_rpn(tree) -> list:
    """The reverse Polish form of an expression tree (what kuiper.layers.expression_parser.parse returns):
    the same list of Operand, Literal and Apply(name, arity) items as kuiper's to_rpn, but computed without
    recursion, with an explicit stack of nodes. See course_notes/09-expressions.md, exercise 3."""
    result = []
    stack = [(tree, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, Call):
            result.append(node)
        elif children_done:
            result.append(Apply(node.name, len(node.args)))
        else:
            stack.append((node, True))
            stack.extend((arg, False) for arg in reversed(node.args))
    return result


def to_infix(tree) -> str:
    """The expression as infix text that Python can evaluate: add, sub, mul and div as `+ - * /` with every
    operation in parentheses, "(@0 * @1) + @2"; any other function as a call "exp(@0)", "max(@0, 1)";
    operands as "@k", constants as their value. See course_notes/09-expressions.md, exercise 2."""
    if not isinstance(tree, Call):
        return str(tree)
    args = [to_infix(arg) for arg in tree.args]
    if tree.name in INFIX and len(args) == 2:
        return f"({args[0]} {INFIX[tree.name]} {args[1]})"
    return f"{tree.name}({', '.join(args)})"
