"""Executors: what differs between backends, behind one small interface the graph calls.

    make_layer(op)          which layer class serves the operator on this backend
    build(order)            once, after the layers exist: compile kernels, upload weights
    prepare(plan, order)    once per input signature: give the plan its buffers, choose kernel variants
    forward(plan)           a context around one forward (kuiper's threads awake; an OpenCL enqueuer)
    replay(plan, inputs, feeds)   feed the inputs and replay a recorded forward instead of the walk (True), or not
    feed(op, array, plan)   the tensor a graph input hands over
    output(operand, plan)   the tensor an operator writes an operand into
    run(op, inputs, outputs, plan)   one operator
    results(operands)       the graph outputs as numpy arrays
    device_seconds(op)      the operator's device time in the last forward (None on the host)

Backends: "numpy" (the fast CPU layers of kuiper/cpu/, fused, on kuiper's threads), "reference" (only the
textbook layers of kuiper/layers/, as the file has them) and "opencl" (kuiper/runtime/opencl_executor.py).
"""

from __future__ import annotations

import contextlib

import numpy as np

from kuiper.cpu import blas, threads
from kuiper.cpu.gated import GatedLinear
from kuiper.layers.copy_chain import CopyChain
from kuiper.layers.fused import FusedLayer
from kuiper.layers.heads import SplitHeads
from kuiper.runtime.backends import backend_class
from kuiper.core.tensor import Tensor


class NumpyExecutor:
    name = "numpy"
    device = False  # the graph's inputs and outputs are host arrays, not pooled buffers
    fuses = True    # the graph's passes run: gated-MLP, sibling projections, heads, copies and fusion
    replays = False  # a plan's later forwards walk the graph as its first did (see `replay`)
    runtime = None       # no OpenCL runtime
    host_fallbacks = ()  # every layer runs here
    # what the passes make
    fused_class, chain_class, gated_class, heads_class = FusedLayer, CopyChain, GatedLinear, SplitHeads

    def make_layer(self, op):
        return backend_class(op.type, self.name, op.name)(op)

    def build(self, order: list) -> None:
        """Nothing to compile or upload on the host; a word if numpy's BLAS misreads the CPU (cpu/blas.py)."""
        blas.warn_if_misread()

    def prepare(self, plan, order: list) -> None:
        plan.place([np.empty(size, dtype=np.uint8) for size in plan.assignment.slot_sizes], _host_view)
        # the rule's variant for every layer that has several (kuiper/core/variants.py), built now: Winograd's weights
        plan.variants = {op.name: op.layer.variants.fix([plan.shapes[o.name] for o in op.input_operands])
                         for op in order if op.layer is not None and op.layer.variants is not None}

    def release(self, plan) -> None:
        """Host buffers go with the plan."""

    def forward(self, plan):
        # layers split their work over kuiper's threads, awake for the forward; BLAS keeps to one meanwhile
        return threads.active()

    def replay(self, plan, input_operators: list, feeds: dict) -> bool:
        return False  # the layers' own work is the host's time here: nothing to replay

    def feed(self, op, array: np.ndarray, plan) -> Tensor:
        return Tensor.from_numpy(array)

    def output(self, operand, plan) -> Tensor:
        tensor = plan.tensors.get(operand.name)
        if tensor is None:  # a graph output: a fresh array the caller will own
            tensor = Tensor.empty(plan.shapes[operand.name], dtype=plan.dtypes[operand.name])
        return tensor

    def run(self, op, inputs: list, outputs: list, plan) -> None:
        op.layer.forward_numpy([t.data for t in inputs], [t.data for t in outputs])

    def results(self, operands: list) -> list:
        return [operand.tensor.data for operand in operands]

    def device_seconds(self, op):
        return None


class ReferenceExecutor(NumpyExecutor):
    """The textbook: every layer's reference forward on one thread, nothing fused or in place."""

    name = "reference"
    fuses = False

    def forward(self, plan):
        return contextlib.nullcontext()


def _host_view(slot: np.ndarray, shape: tuple, dtype) -> Tensor:
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return Tensor.from_numpy(slot[:nbytes].view(dtype).reshape(shape))
