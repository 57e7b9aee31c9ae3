"""Causal grouped-query attention over a KV cache on OpenCL (the layer itself: kuiper/layers/cached_attention.py).

The cache lives on the device: two buffers of (B, num_kv_heads, max_positions, head_dim), at the runtime's
storage precision (half at fp16: half the memory a long context takes), allocated at the first forward of a
batch size and never copied to the host. Each forward enqueues two kernels of cl/cached_attention.cl:

  cache_write        the step's k and v into the cache at positions start .. start + S - 1
  cached_attention   each query row (b, h, s) over cache positions 0 .. start + s, one work-group a row,
                     keys in chunks with a running softmax: no scores array, whatever the context

On CPUs the second is cached_attention_rows instead: one work-item a row, built for the layer's head_dim so that
the query and the accumulator sit in float8 registers, and launched in work-groups of one so that the driver
spreads the rows over the cores (a decode step has only num_heads of them).

`filled` and the checks on the positions are the reference's, on the host: the positions are read back once per
forward (kuiper/opencl/indices.py), and `start` goes to the kernels as a number. reset() needs nothing from the
device: positions past `filled` are never read, so the cache's old contents are as good as empty.

The cache belongs to the runtime the layer was built for; built for another (another device, or the same at
another precision) the layer starts an empty cache there. `device_cache()` downloads what it holds, for tests
and lessons.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.errors import InputError
from kuiper.layers import cached_attention
from kuiper.opencl.indices import host_indices
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.reduce import GROUP_SIZE
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import DeviceTensor, round_up

#: keys a work-group of one scores before it folds them into its accumulator (cached_attention_rows: CHUNK):
#: the accumulator is rescaled once per chunk, so longer chunks rescale less; a chunk must fit in local memory
CPU_CHUNK = 128


@opencl("kuiper.CachedAttention")
class CachedAttention(OpenCLLayer, cached_attention.CachedAttention):
    replayable = False  # its launches follow the positions its cache holds

    def __init__(self, op):
        super().__init__(op)
        self.cl_runtime = None  # the runtime the kernels and the cache belong to
        self.cl_cache = None    # (keys, values) device buffers, made at the first forward of a batch size
        self.cl_batch = 0

    def build_opencl(self, rt):
        if rt is self.cl_runtime:  # built again (run_opencl builds at every call): the cache stays
            return
        import pyopencl as cl

        self.cl_runtime, self.cl_cache, self.filled = rt, None, 0
        self.cl_write = rt.kernel("cached_attention.cl", "cache_write")
        self.cl_attend = rt.kernel("cached_attention.cl", "cached_attention")
        self.cl_rows = rt.kernel("cached_attention.cl", "cached_attention_rows", [f"-DHEAD_DIM={self.head_dim}"]) \
            if rt.is_cpu and self.head_dim % 8 == 0 else None
        limit = min(GROUP_SIZE, rt.device.max_work_group_size, self.cl_attend.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, rt.device))
        # a power of two, as the group's reductions halve it; one work-item on CPUs, a core walking its row alone
        self.cl_largest = 1 if rt.is_cpu else 1 << (limit.bit_length() - 1)
        self.cl_space = {}  # local memory objects by size

    def forward_opencl(self, q, inputs, outputs):
        query, key, value, positions = inputs
        out = outputs[0]
        batch, _, tokens, dim = query.shape
        start = self.check_positions(host_indices(q, positions))
        rt = self.cl_runtime
        if self.cl_cache is None or self.cl_batch != batch:
            if start:
                raise InputError(f"{self.op.type} operator '{self.op.name}': a new batch size ({batch}) starts a "
                                 f"new cache, at position 0, not {start}")
            nbytes = batch * self.num_kv_heads * self.max_positions * dim * rt.stored(np.float32).itemsize
            self.cl_cache, self.cl_batch = (rt.allocate(nbytes), rt.allocate(nbytes)), batch
        end = start + tokens
        self.filled = end
        cache_k, cache_v = self.cl_cache
        if not out.size:
            return
        count = tokens * dim
        q.run(self.cl_write, (round_up(count, 64), batch * self.num_kv_heads), None, cache_k, cache_v, key.buffer,
              value.buffer, count, self.max_positions, dim, start)
        scale = float(np.float32(1 / math.sqrt(dim)))
        rows = batch * self.num_heads * tokens
        if self.cl_rows is not None:
            q.run(self.cl_rows, (rows,), (1,), out.buffer, query.buffer, cache_k, cache_v, rows,
                  self.num_heads, self.num_kv_heads, tokens, self.max_positions, start, scale)
            return
        # a group no larger than the row needs: at most one work-item per key or coordinate
        group = min(self.cl_largest, 1 << (max(end, dim) - 1).bit_length())
        chunk = CPU_CHUNK if group == 1 else group
        q.run(self.cl_attend, (rows * group,), (group,), out.buffer, query.buffer, cache_k, cache_v, self.num_heads,
              self.num_kv_heads, tokens, dim, self.max_positions, start, scale, chunk,
              self.local_space(group + chunk + 2 * dim))

    def local_space(self, floats: int):
        """The kernel's local memory of `floats` floats (the group's reduction, a chunk of weights, the query
        and the accumulator), one object per size."""
        space = self.cl_space.get(floats)
        if space is None:
            import pyopencl as cl

            space = self.cl_space[floats] = cl.LocalMemory(4 * floats)
        return space

    def device_cache(self) -> tuple:
        """The cached keys and values of positions 0 .. filled - 1, downloaded: two (B, num_kv_heads, filled,
        head_dim) float32 arrays (None before the first forward). A forward never does this."""
        if self.cl_cache is None:
            return None
        rt = self.cl_runtime
        shape = (self.cl_batch, self.num_kv_heads, self.max_positions, self.head_dim)
        return tuple(DeviceTensor(rt, buffer, shape, rt.stored(np.float32)).numpy()[:, :, :self.filled]
                     .astype(np.float32) for buffer in self.cl_cache)
