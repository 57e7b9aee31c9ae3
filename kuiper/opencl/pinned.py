"""Uploads through page-locked host memory, for a GPU across a bus.

A write from an ordinary numpy array goes through the driver's own staging: it copies the array into
page-locked memory in one thread, then the DMA engine moves it, and that copy, not the bus, bounds the rate.
`PinnedUploads` keeps a page-locked buffer of its own, mapped once, copies an array into it in chunks from a
few threads, and enqueues each chunk's DMA as soon as its copy is done, so that the copies share the cores and
overlap the bus (measured in docs/runtime.md). Only for arrays of a chunk or more: smaller ones gain nothing
from the threads.

The memory is reused: before a new upload overwrites a region, the transfers still reading it are waited
for (a forward finishes its queue before it returns, so that wait is normally empty).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kuiper.opencl.devices import _cl

#: arrays smaller than this go to the driver as they are
SMALLEST = 1 << 21
#: bytes per chunk: a thread's copy, and one DMA command
CHUNK = 1 << 21


class PinnedUploads:
    """Page-locked staging for one runtime's uploads; `write` is Enqueuer.write's for large arrays."""

    def __init__(self, runtime, threads: int | None = None):
        self.runtime = runtime
        self.threads = threads or max(1, min(4, (os.cpu_count() or 1) // 2))
        self._pool = None
        self._buffer = self._host = None
        self._cursor = 0
        self._pending = []  # the transfers reading the buffer since the cursor last went back to 0

    def write(self, queue, buffer, array: np.ndarray, wait_for=None) -> list:
        """Enqueue the upload of `array` into `buffer` (non-blocking), each chunk after the events `wait_for`;
        returns the chunks' events."""
        cl = _cl()
        source = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        host = self._region(source.nbytes)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kuiper-upload")
        starts = range(0, source.nbytes, CHUNK)
        copies = [self._pool.submit(np.copyto, host[s:s + CHUNK], source[s:s + CHUNK]) for s in starts]
        events = []
        for start, copy in zip(starts, copies):
            copy.result()
            events.append(cl.enqueue_copy(queue, buffer, host[start:start + CHUNK], dst_offset=start,
                                          is_blocking=False, wait_for=wait_for))
        self._pending.extend(events)
        return events

    def _region(self, nbytes: int) -> np.ndarray:
        """`nbytes` of the page-locked buffer that no enqueued transfer still reads."""
        if self._host is None or self._cursor + nbytes > self._host.nbytes:
            if self._pending:
                _cl().wait_for_events(self._pending)
            self._pending, self._cursor = [], 0
            if self._host is None or nbytes > self._host.nbytes:
                self._allocate(nbytes)
        region = self._host[self._cursor:self._cursor + nbytes]
        self._cursor += nbytes
        return region

    def _allocate(self, nbytes: int) -> None:
        cl = _cl()
        size = 1 << (nbytes - 1).bit_length()
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        self._buffer = cl.Buffer(self.runtime.context, flags, size)
        self._host, _ = cl.enqueue_map_buffer(self.runtime.queue, self._buffer, cl.map_flags.WRITE, 0, (size,),
                                              np.uint8)
