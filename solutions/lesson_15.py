"""Lesson 15: The OpenCL runtime. Reference solutions."""


class BestFitPool:
    """A pool of buffers recycled by size, as kuiper's BufferPool: `take(nbytes)` returns the smallest free
    buffer of at least `nbytes` bytes (of equal sizes, the one given back first), or, when none is free, a new
    one from `allocate(nbytes)`, counted in `allocations`; `give(buffer)` puts one back. A buffer's size is
    `buffer.size`. Requests below 4 bytes count as 4. See course_notes/15-opencl-runtime.md, "The buffer pool"."""

    def __init__(self, allocate):
        """Keep `allocate`, start `allocations` at 0 and the pool empty.
        See course_notes/15-opencl-runtime.md, "The buffer pool"."""
        self.allocate = allocate
        self.allocations = 0
        self.free = []            # (size, when given back, buffer)
        self.given = 0

    def take(self, nbytes: int):
        """The smallest free buffer that holds `nbytes` (of equal sizes, the one given back first), else a new
        one from `allocate`, counted. See course_notes/15-opencl-runtime.md, "The buffer pool"."""
        nbytes = max(int(nbytes), 4)
        fitting = [entry for entry in self.free if entry[0] >= nbytes]
        if fitting:
            best = min(fitting, key=lambda entry: entry[:2])
            self.free.remove(best)
            return best[2]
        self.allocations += 1
        return self.allocate(nbytes)

    def give(self, buffer) -> None:
        """Put `buffer` back for reuse. See course_notes/15-opencl-runtime.md, "The buffer pool"."""
        self.given += 1
        self.free.append((buffer.size, self.given, buffer))
