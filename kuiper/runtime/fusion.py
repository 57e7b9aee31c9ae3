"""The fusion pass: rewrite the operator list so that cheap element-wise work rides along with the operator
before it, and let element-wise operators overwrite their input instead of writing a buffer of their own.

Two rewrites, over the operators in execution order:

- **Fuse**: an activation that works in place (ReLU, clamps: ElementwiseLayer.in_place; on OpenCL, every
  activation with an OpenCL formula, since its kernel can overwrite its input) or a sum of two
  same-shape tensors (pnnx.Expression add(@0,@1): ResNet's residual add) whose input has no other reader
  joins the operator that produced that input, if that operator's layer applies an epilogue itself
  (`forward_epilogue`, as the fast CPU convolution does, band by band while the band is in the cache; or
  `takes_opencl_epilogue`, as Conv2d's GEMM does on OpenCL, value by value as it stores them).
  `conv -> add -> relu` becomes ONE operator whose layer is a FusedLayer (kuiper/layers/fused.py): the
  convolution, then the steps [add the other tensor, relu]. The other tensor of the sum becomes an ordinary
  input of the fused operator, so the BFS waits for it like for any input.
- **In place**: such an activation or sum that cannot be fused overwrites its input: its output operand is
  marked `overwrites` that input, and the memory plan gives it the input's buffer.
- **Views**: a reshape (any ViewLayer: view, flatten, squeeze, unsqueeze, identity) whose input has no other
  reader is marked the same way. Its output is the input's buffer under the new shape, so it copies nothing
  (MaxViT-T runs 165 reshapes a forward).

The graph's inputs (the caller's arrays) and outputs (fresh arrays per forward) are never overwritten or
fused away. The BFS, the memory plan and both backends then see an ordinary graph: which operators fuse
depends only on the layers the backend made (`kuiper inspect` shows the graph before and after).
"""

from __future__ import annotations

from kuiper.layers.elementwise import ElementwiseLayer
from kuiper.layers.expression import Expression
from kuiper.layers.fused import EpilogueStep, FusedLayer
from kuiper.layers.reshape import ViewLayer
from kuiper.opencl.layer import runs_on_device
from kuiper.core.operators import RuntimeOperator, link_successors


def fuse(order: list, graph_ends: set, fused_class=FusedLayer, on_device: bool = False) -> list:
    """Rewrite `order` (operators in execution order, linked) as described above; returns the new operator
    list, still in execution order. `graph_ends` are the names of the graph's input and output operands;
    `fused_class` is the backend's FusedLayer. on_device: the layers run on OpenCL, where every activation with
    an OpenCL forward works in place, whether or not its numpy forward does."""
    groups = {}  # name of an operand a fused group ends in -> that group (a dict, see _extend)
    removed = set()
    for op in order:
        if op.layer is None or len(op.output_operands) != 1 or op.output_operand.name in graph_ends:
            continue
        if isinstance(op.layer, ViewLayer):
            (source,) = op.input_operands
            if source.consumers == [op] and source.name not in graph_ends:
                op.output_operand.overwrites = source
            continue
        if isinstance(op.layer, ElementwiseLayer) and len(op.input_operands) == 1 and (
                op.layer.in_place or on_device and runs_on_device(op.layer)):
            sources = op.input_operands
        elif isinstance(op.layer, Expression) and op.layer.adds_two_inputs:
            # the sum has one input's shape (as the file records it), not a broadcast larger one
            sources = [s for s in op.input_operands if s.shape is not None and s.shape == op.output_operand.shape]
        else:
            continue
        for source in sources:
            if source.consumers != [op] or source.name in graph_ends:
                continue
            others = [o for o in op.input_operands if o is not source]
            # an epilogue adds a tensor of the output's own shape: one broadcast to it (TNT's pixel positions,
            # (1, C, H, W) added to a batch of patches) leaves the sum a layer of its own, in place
            fits = all(o.shape is not None and o.shape == op.output_operand.shape for o in others)
            group = (groups.pop(source.name, None) or _start(source.producer)) if fits else None
            if group is not None:
                _extend(group, op, others)
                groups[op.output_operand.name] = group
                removed.add(op.name)
            else:
                op.output_operand.overwrites = source
            break
    fused = {id(group["main"]): group for group in groups.values()}
    result = []
    for op in order:
        if op.name in removed:
            continue
        group = fused.get(id(op))
        result.append(op if group is None else _fused_operator(group, fused_class))
    link_successors(result)
    return result


def _start(producer) -> dict | None:
    """A new group around `producer`, if its layer applies epilogues itself."""
    layer = producer.layer if producer is not None else None
    if layer is None or not (hasattr(layer, "forward_epilogue") or getattr(layer, "takes_opencl_epilogue", False)):
        return None
    if len(producer.output_operands) != 1:
        return None
    return {"main": producer, "steps": [], "extras": [], "absorbed": [], "output": producer.output_operand,
            "overwrites": producer.output_operand.overwrites}


def _extend(group: dict, op, others: list) -> None:
    """Add `op` (an activation, or a sum with the tensor in `others`) to the group's epilogue."""
    main = group["main"]
    extra = None
    if others:
        extra = len(main.input_operands) + len(group["extras"])
        group["extras"].append(others[0])
    group["steps"].append(EpilogueStep(op.layer, extra))
    group["absorbed"].append(op)
    group["output"] = op.output_operand


def _fused_operator(group: dict, fused_class) -> RuntimeOperator:
    """The operator that replaces the group: main's inputs and the summed tensors in, the last step's output
    out. It keeps main's name (profiles and variants stay keyed by it) and names every type it does."""
    main, absorbed = group["main"], group["absorbed"]
    fused = RuntimeOperator("+".join([main.type] + [op.type for op in absorbed]), main.name, line=main.line)
    fused.input_operands = main.input_operands + group["extras"]
    fused.input_names = main.input_names + [""] * len(group["extras"])
    fused.output_operands = [group["output"]]
    group["output"].producer = fused
    group["output"].overwrites = group["overwrites"]  # a main working in place still does, steps and all
    replaced = {id(main), *(id(op) for op in absorbed)}
    for operand in fused.input_operands:
        operand.consumers = [fused if id(c) in replaced else c for c in operand.consumers]
    fused.layer = fused_class(fused, main.layer, group["steps"], len(main.input_operands))
    fused.absorbed = [main] + absorbed
    return fused
