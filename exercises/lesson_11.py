"""Lesson 11: Forward. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 11`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""

from collections import deque


def bfs_order(records) -> list:
    """The names of the operators of `records` (what kuiper.pnnx.parse_param returns) in the order forward's
    breadth-first search runs them: start from the operators without inputs, in file order; when an
    operator runs, each of its successors (lesson 5: each once, in order of first use) counts the input slots
    it fills, and enters the queue once all its slots are filled. Keep the counts in a dictionary.
    See course_notes/11-forward.md, exercise 2."""
    raise NotImplementedError('lesson 11: write bfs_order() in exercises/lesson_11.py; '
                              'see course_notes/11-forward.md, exercise 2')
