"""What `kuiper inspect` and `kuiper run --profile` report, as plain data (the CLI only renders it)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from kuiper.custom import CustomLayer
from kuiper.runtime.graph import INPUT, STRUCTURAL, RuntimeGraph


@dataclass
class OperatorRow:
    name: str
    type: str
    inputs: list   # shapes
    outputs: list  # shapes
    params: int    # number of weight values
    macs: int      # multiply-accumulates for one forward at these shapes


def operator_rows(graph: RuntimeGraph, plan) -> list:
    rows = []
    for op in graph.order:
        if op.type in STRUCTURAL and op.type != INPUT:
            continue
        ins = [plan.shapes[o.name] for o in op.input_operands]
        outs = [plan.shapes[o.name] for o in op.output_operands]
        params = sum(int(np.prod(a.shape, dtype=np.int64)) for part in (op.absorbed or [op]) for a in part.attrs.values())
        macs = op.layer.macs(ins, outs) if op.layer is not None else 0
        rows.append(OperatorRow(op.name, op.type, ins, outs, params, macs))
    return rows


def fusion_summary(graph: RuntimeGraph) -> tuple:
    """([fused operators], [operators working in place]) of a built graph (runtime/fusion.py)."""
    fused = [op for op in graph.order if op.absorbed]
    in_place = [op for op in graph.order if op.output_operands and op.output_operand.overwrites is not None]
    return fused, in_place


def custom_operators(graph: RuntimeGraph) -> list:
    """[(operator, config path)] for each operator of a built graph that a custom operator serves."""
    return [(op, op.layer.config.path) for op in graph.order if isinstance(op.layer, CustomLayer)]


def activation_memory(graph: RuntimeGraph, plan) -> dict:
    """Bytes of activations: as planned (shared buffers) and as they would be with one buffer each."""
    outputs = sum(
        int(np.prod(plan.shapes[o.name], dtype=np.int64)) * plan.dtypes[o.name].itemsize
        for o in graph.output_operands
    )
    return {
        "planned": plan.pooled_bytes + outputs,
        "unplanned": plan.unpooled_bytes() + outputs,
        "buffers": len(plan.assignment.slot_sizes),
    }


def profile_by_type(profile: list) -> "OrderedDict[str, tuple]":
    """{type: (count, host seconds, device seconds or None)} from forward(profile=True)'s
    [(operator, host seconds, device seconds or None)], slowest first."""
    totals = {}
    for op, host, device in profile:
        count, host_total, device_total = totals.get(op.type, (0, 0.0, None))
        if device is not None:
            device_total = (device_total or 0.0) + device
        totals[op.type] = (count + 1, host_total + host, device_total)
    return OrderedDict(sorted(totals.items(), key=lambda kv: -(kv[1][2] if kv[1][2] is not None else kv[1][1])))


def _edges(graph: RuntimeGraph):
    """(producer, consumer, shape label) for every operand, each consumer once."""
    for op in graph.operators:
        for operand in op.output_operands:
            label = "x".join(str(d) for d in operand.shape) if operand.shape else ""
            for succ in dict.fromkeys(operand.consumers):
                yield op, succ, label


def mermaid(graph: RuntimeGraph) -> str:
    """The graph as mermaid flowchart text (renders on GitHub and in most markdown viewers)."""
    ids = {op.name: f"n{i}" for i, op in enumerate(graph.operators)}
    lines = ["flowchart TD"]
    lines += [f'    {ids[op.name]}["{op.name}<br/>{op.type}"]' for op in graph.operators]
    for src, dst, label in _edges(graph):
        lines.append(f"    {ids[src.name]} -->{f'|{label}|' if label else ''} {ids[dst.name]}")
    return "\n".join(lines) + "\n"


def dot(graph: RuntimeGraph) -> str:
    """The graph in graphviz DOT text (`dot -Tsvg` draws it)."""
    ids = {op.name: f"n{i}" for i, op in enumerate(graph.operators)}
    lines = ["digraph kuiper {", "  node [shape=box, fontname=Helvetica];"]
    lines += [f'  {ids[op.name]} [label="{op.name}\\n{op.type}"];' for op in graph.operators]
    for src, dst, label in _edges(graph):
        lines.append(f'  {ids[src.name]} -> {ids[dst.name]} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
