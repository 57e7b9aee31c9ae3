"""nn.Embedding and F.embedding on OpenCL (the layer itself: kuiper/layers/embedding.py): cl/embedding.cl gathers
the rows of the ids, one work-item per element.

The ids arrive as the graph stores int64 tensors on the device, as they are (OpenCLRuntime.stored changes only
float32); the table is a weight, uploaded once at build, half at fp16 precision like every float weight, or
F.embedding's second input. An id out of range is the caller's error here as on numpy: the ids are read back
first (kuiper/opencl/indices.py), a download of a few int64s at the start of a decoder's forward, unless the caller
checks them itself (`ids_checked`, as a language model does), and then the layer's launches replay
(kuiper/opencl/replay.py).
"""

from __future__ import annotations

from kuiper.layers import embedding
from kuiper.opencl.indices import IndexKernels, host_indices
from kuiper.opencl.layer import OpenCLLayer
from kuiper.opencl.registry import opencl
from kuiper.opencl.runtime import round_up


@opencl("nn.Embedding", "F.embedding")
class Embedding(OpenCLLayer, embedding.Embedding):
    def build_opencl(self, rt):
        self.cl_gather = IndexKernels(rt, "embedding.cl", "embedding_rows")
        self.cl_table = None if self.table is None else rt.upload(self.table)

    def forward_opencl(self, q, inputs, outputs):
        ids, out = inputs[0], outputs[0]
        table, rows = (self.cl_table, self.num_embeddings) if self.table is not None else \
            (inputs[1].buffer, inputs[1].shape[0])
        if not ids.size:  # OpenCL refuses an empty range
            return
        if not self.ids_checked:
            self.check_ids(host_indices(q, ids), rows)
        dim = out.shape[-1]
        q.run(self.cl_gather[ids.dtype], (round_up(dim, 16), ids.size), None, out.buffer, ids.buffer, table,
              ids.size, dim, rows)
