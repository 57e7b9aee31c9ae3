"""Causal grouped-query attention over a paged KV cache on OpenCL (the layer itself:
kuiper/layers/cached_attention.py).

The pool lives on the device: two buffers of (num_kv_heads, blocks x BLOCK_SIZE, head_dim), at the runtime's
storage precision (half at fp16: half the memory a long context takes), allocated at the first forward and
never copied to the host. Each forward enqueues two kernels of cl/cached_attention.cl:

  cache_write        the step's k and v into the slots the page layout gives each token
  cached_attention   each query row (b, h, s) over its sequence's positions 0 .. its own, read through the
                     sequence's block table, one work-group a row, keys in chunks with a running softmax: no
                     scores array, whatever the context

On CPUs the second is cached_attention_blocks instead: one work-item a token and K/V head, for the query heads
that share it, built for the layer's head_dim so that queries and accumulators sit in float8 registers, and
launched in work-groups of one so that the driver spreads them over the cores. There the pool holds each block's
keys transposed, a coordinate of its BLOCK_SIZE keys side by side, so that a block's scores are whole-vector
multiply-adds (cache_write stores them so); the values keep the rows layout.

The page layout is the reference's (kuiper/layers/pages.py), worked out on the host: its slots, ends and block
tables go to the device as one int32 buffer. The layer's own layout (no model's) checks the positions, read back
once per forward (kuiper/opencl/indices.py), and its upload is shared by every layer of the forward.

A model's pages (use_pool, then use before each forward) make the layer replayable (kuiper/opencl/replay.py):
its launches then follow the shapes alone. Each layer keeps a buffer of its own, sized for the pool, which
`refresh_opencl` fills with the next forward's layout before the recorded launches run (in order, the first
layer of a forward alone: the others read its buffer), and the attention's work-group is the largest, whatever
the positions. The positions are not read back: the model makes them and the
layout together (kuiper/llm/model.py), and the layout's own positions are checked against max_positions.

The cache belongs to the runtime the layer was built for; built for another (another device, or the same at
another precision) the layer starts an empty pool there. `device_cache()` downloads what it holds, for tests
and lessons.
"""

from __future__ import annotations

import math

import numpy as np

from kuiper.core.errors import InputError
from kuiper.layers import cached_attention
from kuiper.layers.pages import BLOCK_SIZE
from kuiper.opencl.indices import host_indices
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.reduce import GROUP_SIZE
from kuiper.opencl.registry import opencl
from kuiper.opencl.replay import stale_recordings
from kuiper.opencl.runtime import DeviceTensor, round_up

#: keys a work-group of one scores before it folds them into its accumulator (the general kernel on a CPU, for a
#: head_dim not a multiple of 8): the accumulator is rescaled once per chunk, so longer chunks rescale less; a chunk
#: must fit in local memory
CPU_CHUNK = 128


@opencl("kuiper.CachedAttention")
class CachedAttention(OpenCLLayer, cached_attention.CachedAttention):
    cache_k = cache_v = None  # the pool is two device buffers (`pool`): device_cache() downloads them

    def __init__(self, op):
        super().__init__(op)
        self.cl_runtime = None  # the runtime the kernels and the pool belong to
        self.cl_slots = 0       # slots per buffer of the pool
        self.cl_pages = None    # a model's layouts, one after another, for replayed launches (refresh_opencl)
        self.cl_reading = None  # the buffer holding this forward's layout: cl_pages, or an earlier layer's
        self.cl_holds = None    # the layout cl_pages holds

    @property
    def replayable(self) -> bool:
        """With a model's pool and layout: its own cache's launches follow the positions it holds."""
        return self.layout is not None and self.pool_blocks is not None

    def use_pool(self, blocks: int) -> None:
        super().use_pool(blocks)
        self.cl_pages = self.cl_holds = None
        stale_recordings()  # recorded forwards read the pool and pages the layer had before

    def refresh_opencl(self, q) -> None:
        """Before each forward, recorded or replayed: the layout's slots, ends and tables into `cl_pages`, made
        for the pool at the first (a token takes a slot, a table at most every block: 3 ints a slot, 1 a block).
        In order, the first layer of the forward to meet the layout uploads it, and the model's other layers read
        that layer's buffer (`cl_reading`): one upload a step, not one a layer (a GPU's decode step is bound by
        its launches and uploads). The levelized schedule orders a layer's kernels after its own upload alone."""
        if not self.replayable:
            return
        key = ("pages", self.cl_runtime)
        uploader = None if q.levels else self.layout.device.get(key)
        if uploader is not None and uploader.cl_holds is self.layout:  # (not overwritten by another layout since)
            self.cl_reading = uploader.cl_pages
            return
        capacity = 4 * (3 * BLOCK_SIZE + 1) * self.pool_blocks
        if self.cl_pages is None:
            self.cl_pages = self.cl_runtime.allocate(capacity)
        array = self.layout_array(self.layout)
        if array.nbytes > capacity:  # a layout whose tokens or tables outnumber the pool's slots or blocks
            raise InputError(f"{self.op.type} operator '{self.op.name}': a page layout of {self.layout.tokens} tokens "
                             f"and {self.layout.tables.size} table entries does not fit a pool of "
                             f"{self.pool_blocks} blocks")
        q.write(self.cl_pages, array)
        self.cl_holds, self.cl_reading = self.layout, self.cl_pages
        if not q.levels:
            self.layout.device[key] = self

    @staticmethod
    def layout_array(layout) -> np.ndarray:
        """The layout as the kernels read it: slots, ends (positions + 1), table_at and tables, int32."""
        array = layout.device.get("array")
        if array is None:
            ends = layout.positions.ravel() + 1
            array = layout.device["array"] = np.concatenate([layout.slots, ends, layout.table_at, layout.tables]) \
                .astype(np.int32)
        return array

    def build_opencl(self, rt):
        if rt is self.cl_runtime:  # built again (run_opencl builds at every call): the cache stays
            return
        import pyopencl as cl

        self.cl_runtime, self.pool, self.filled = rt, None, 0
        self.cl_attend = rt.kernel("cached_attention.cl", "cached_attention")
        # a coordinate of a block's keys is whole float8 vectors: blocks of a multiple of 8 slots
        self.cl_blocks = None
        if rt.is_cpu and self.head_dim % 8 == 0 and BLOCK_SIZE % 8 == 0:
            options = [f"-DHEAD_DIM={self.head_dim}", f"-DQUERIES={self.num_heads // self.num_kv_heads}",
                       f"-DKEYS_BY_BLOCK={BLOCK_SIZE}"]
            self.cl_blocks = rt.kernel("cached_attention.cl", "cached_attention_blocks", options)
            self.cl_write = rt.kernel("cached_attention.cl", "cache_write_rows", options)
        else:
            self.cl_write = rt.kernel("cached_attention.cl", "cache_write")
        limit = min(GROUP_SIZE, rt.device.max_work_group_size, self.cl_attend.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, rt.device))
        # a power of two, as the group's reductions halve it; one work-item on CPUs, a core walking its row alone
        self.cl_largest = 1 if rt.is_cpu else 1 << (limit.bit_length() - 1)
        self.cl_space = {}  # local memory objects by size

    def layout_index(self, layout) -> tuple:
        """(the layout's int32 buffer on this runtime, the offsets of ends, table_at and tables in it): the layer's
        own buffer with a model's pages, else one uploaded once per layout and runtime."""
        tokens = layout.slots.size
        if self.replayable:
            return self.cl_reading, tokens, 2 * tokens, 3 * tokens
        found = layout.device.get(self.cl_runtime)
        if found is None:
            found = layout.device[self.cl_runtime] = (self.cl_runtime.upload(self.layout_array(layout)), tokens,
                                                      2 * tokens, 3 * tokens)
        return found

    def forward_opencl(self, q, inputs, outputs):
        query, key, value, positions = inputs
        out = outputs[0]
        batch, _, tokens, dim = query.shape
        if self.replayable:
            layout, fresh = self.layout, self.pool is None
            self.check_reach(layout)
        else:
            layout, fresh = self.step(batch, tokens, host_indices(q, positions))
        rt = self.cl_runtime
        if fresh:
            self.cl_slots = self.blocks(batch) * BLOCK_SIZE
            nbytes = self.num_kv_heads * self.cl_slots * dim * rt.stored(np.float32).itemsize
            self.pool, self.pool_rows = (rt.allocate(nbytes), rt.allocate(nbytes)), \
                (0 if self.layout is not None else batch)
        if not out.size:
            return
        cache_k, cache_v = self.pool
        index, ends, table_at, tables = self.layout_index(layout)
        scale = float(np.float32(1 / math.sqrt(dim)))
        if self.cl_blocks is not None:
            q.run(self.cl_write, (tokens, batch * self.num_kv_heads), None, cache_k, cache_v, key.buffer, value.buffer,
                  index, tokens, self.num_kv_heads, self.cl_slots)
            items = batch * self.num_kv_heads * tokens
            q.run(self.cl_blocks, (items,), (1,), out.buffer, query.buffer, cache_k, cache_v, index, items,
                  self.num_heads, self.num_kv_heads, tokens, self.cl_slots, ends, table_at, tables, scale,
                  int(self.heads_last))
            return
        q.run(self.cl_write, (round_up(tokens * dim, 64), batch * self.num_kv_heads), None, cache_k, cache_v,
              key.buffer, value.buffer, index, tokens, self.num_kv_heads, dim, self.cl_slots)
        rows = batch * self.num_heads * tokens
        common = (self.cl_slots, BLOCK_SIZE, ends, table_at, tables, scale)
        # a group no larger than the row needs: at most one work-item per key or coordinate (replayed: any row)
        longest = self.max_positions if self.replayable else int(layout.positions.max()) + 1
        group = min(self.cl_largest, 1 << (max(longest, dim) - 1).bit_length())
        chunk = CPU_CHUNK if group == 1 else group
        q.run(self.cl_attend, (rows * group,), (group,), out.buffer, query.buffer, cache_k, cache_v, index,
              self.num_heads, self.num_kv_heads, tokens, dim, *common, int(self.heads_last), chunk,
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
        """The cached keys and values of positions 0 .. filled - 1 of the layer's own sequences, downloaded: two
        (B, num_kv_heads, filled, head_dim) float32 arrays (None before the first forward). A forward never does
        this."""
        if self.pool is None:
            return None
        rt = self.cl_runtime
        heads, slots, dim = self.num_kv_heads, self.cl_slots, self.head_dim
        pools = [DeviceTensor(rt, buffer, (heads, slots, dim), rt.stored(np.float32)).numpy() for buffer in self.pool]
        if self.cl_blocks is not None:  # the keys by block, transposed
            pools[0] = pools[0].reshape(heads, -1, dim, BLOCK_SIZE).transpose(0, 1, 3, 2).reshape(heads, slots, dim)
        return tuple(self.as_rows(pool)[:, :, :self.filled].astype(np.float32) for pool in pools)
