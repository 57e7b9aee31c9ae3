"""Lesson 11: Forward. Reference solutions."""

from collections import deque


def bfs_order(records) -> list:
    """The names of the operators of `records` (what kuiper.pnnx.parse_param returns) in the order forward's
    breadth-first search runs them: start from the operators without inputs, in file order; when an
    operator runs, each of its successors (lesson 5: each once, in order of first use) counts the input slots
    it fills, and enters the queue once all its slots are filled. Keep the counts in a dictionary.
    See course_notes/11-forward.md, exercise 2."""
    operators = {op.name: op for op in records.operators}
    filled = {name: 0 for name in operators}
    queue = deque(op.name for op in records.operators if not op.inputs)
    order = []
    while queue:
        name = queue.popleft()
        order.append(name)
        successors = []
        for operand in operators[name].outputs:
            for consumer in records.operands[operand].consumers:  # one entry per slot: keep each once
                if consumer not in successors:
                    successors.append(consumer)
        for succ in successors:
            inputs = operators[succ].inputs
            filled[succ] += sum(operand in operators[name].outputs for operand in inputs)
            if filled[succ] == len(inputs):
                queue.append(succ)
    return order
