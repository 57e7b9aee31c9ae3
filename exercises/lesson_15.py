"""Lesson 15: The OpenCL runtime. Your exercise.

Replace each `raise NotImplementedError(...)` below with your code (the docstring says what to
write), then run `kuiper lesson 15`: its checkpoint calls these and compares the results with kuiper's own
implementation, numpy or PyTorch's saved outputs.
"""


class BestFitPool:
    """A pool of buffers recycled by size, as kuiper's BufferPool: `take(nbytes)` returns the smallest free
    buffer of at least `nbytes` bytes (of equal sizes, the one given back first), or, when none is free, a new
    one from `allocate(nbytes)`, counted in `allocations`; `give(buffer)` puts one back. A buffer's size is
    `buffer.size`. Requests below 4 bytes count as 4. See course_notes/15-opencl-runtime.md, "The buffer pool"."""

    def __init__(self, allocate):
        """Keep `allocate`, start `allocations` at 0 and the pool empty.
        See course_notes/15-opencl-runtime.md, "The buffer pool"."""
        raise NotImplementedError('lesson 15: write BestFitPool.__init__() in exercises/lesson_15.py; '
                                  'see course_notes/15-opencl-runtime.md, "The buffer pool"')

    def take(self, nbytes: int):
        """The smallest free buffer that holds `nbytes` (of equal sizes, the one given back first), else a new
        one from `allocate`, counted. See course_notes/15-opencl-runtime.md, "The buffer pool"."""
        raise NotImplementedError('lesson 15: write BestFitPool.take() in exercises/lesson_15.py; '
                                  'see course_notes/15-opencl-runtime.md, "The buffer pool"')

    def give(self, buffer) -> None:
        """Put `buffer` back for reuse. See course_notes/15-opencl-runtime.md, "The buffer pool"."""
        raise NotImplementedError('lesson 15: write BestFitPool.give() in exercises/lesson_15.py; '
                                  'see course_notes/15-opencl-runtime.md, "The buffer pool"')
