"""`kuiper inspect`: a model's operators, shapes, parameters, multiply-adds, memory and what the passes did,
without running it; `--graph` draws it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from kuiper.app.cli.common import CliError, default_model, require, rich_console, shape
from kuiper.app.cli.generate import inspect_model, is_model_dir
from kuiper.layers.reshape import ViewLayer
from kuiper.runtime.backends import BACKENDS


def add_parser(sub, common, custom) -> None:
    """The inspect command and its options."""
    inspect = sub.add_parser("inspect", parents=[common, custom], help="operators, shapes, FLOPs, memory of a model")
    inspect.add_argument("model", nargs="?", help="a .pnnx.param file, or a language model's directory "
                                                  "(default: the embedded ResNet-18)")
    inspect.add_argument("--input-shape", action="append", metavar="N,C,H,W", type=shape,
                         help="inspect at this input shape (once per graph input)")
    inspect.add_argument("--graph", metavar="FILE", help="draw the graph: .mmd (mermaid), .dot, or .svg/.png via graphviz")
    inspect.add_argument("--backend", default="numpy", choices=BACKENDS,
                         help="show the graph as this backend builds it: numpy (default) after the fusion pass, "
                              "reference as the file has it")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    inspect.set_defaults(func=cmd_inspect)


def cmd_inspect(args) -> None:
    from rich.table import Table

    from kuiper.app import inspection
    from kuiper.runtime.graph import RuntimeGraph

    console = rich_console()
    if is_model_dir(args.model):
        inspect_model(args, console)
        return
    param = Path(args.model) if args.model else default_model()
    require(param, "model")
    graph = RuntimeGraph(param, backend=args.backend, custom_ops=args.custom_op).init()
    report = {"model": str(param), "backend": args.backend, "operators": len(graph.operators),
              "operands": len(graph.operands), "graph": args.graph}
    if not args.json:
        console.print(f"[bold]{param}[/]: {len(graph.operators)} operators, {len(graph.operands)} operands")
    missing = graph.missing_types()
    if missing:
        if args.graph:  # as the file has it: unknown types cannot be built
            _draw(graph, Path(args.graph))
        if args.json:
            print(json.dumps({**report, "missing_types": missing}))
            return
        console.print("[red]operator types with no layer:[/]")
        for type_, names in missing.items():
            console.print(f"  {type_}: {', '.join(names)}")
        if args.graph:
            console.print(f"graph written to {args.graph}")
        return

    graph.build(allocate=False)  # shapes and sizes only: inspect allocates no buffer
    if args.graph:
        _draw(graph, Path(args.graph))
        if not args.json:
            console.print(f"graph (as the {args.backend} backend runs it) written to {args.graph}")
    if args.input_shape:
        shapes = args.input_shape
        if len(shapes) != len(graph.input_operators):
            raise CliError(f"--input-shape is given {len(shapes)} time(s), the model has "
                           f"{len(graph.input_operators)} input(s)")
    else:
        shapes = [op.output_operand.shape for op in graph.input_operators]
        if not all(s is not None and all(isinstance(d, int) for d in s) for s in shapes):
            raise CliError("the model records no fixed input shape: give --input-shape")
    plan = graph.layout_for(*shapes)
    rows = inspection.operator_rows(graph, plan)
    memory = inspection.activation_memory(graph, plan)
    needed, limit = graph.planned_bytes(plan), graph.memory_limit
    fused, in_place = inspection.fusion_summary(graph)
    served = inspection.custom_operators(graph)
    if args.json:
        print(json.dumps({
            **report,
            "input_shapes": [list(map(int, s)) for s in shapes],
            "rows": [{"name": r.name, "type": r.type, "inputs": [list(map(int, s)) for s in r.inputs],
                      "outputs": [list(map(int, s)) for s in r.outputs], "params": int(r.params),
                      "macs": int(r.macs)} for r in rows],
            "totals": {"params": sum(int(r.params) for r in rows), "macs": sum(int(r.macs) for r in rows)},
            "memory": {"planned_bytes": int(memory["planned"]), "unplanned_bytes": int(memory["unplanned"]),
                       "buffers": memory["buffers"], "forward_bytes": int(needed), "limit_bytes": int(limit)},
            "fusion": {"operators_before": len(graph.unfused_order), "operators_after": len(graph.order),
                       "fused": [{"name": op.name, "absorbed": [{"name": a.name, "type": a.type}
                                                                for a in op.absorbed]} for op in fused],
                       "in_place": [{"name": op.name, "type": op.type,
                                     "overwrites": op.output_operand.overwrites.name} for op in in_place]},
            "custom_operators": [{"name": op.name, "type": op.type, "config": str(config)}
                                 for op, config in served],
        }))
        return
    table = Table()
    for col in ("operator", "type", "inputs", "outputs", "params", "MMACs"):
        table.add_column(col, justify="right" if col in ("params", "MMACs") else "left")
    for row in rows:
        table.add_row(row.name, row.type, _shapes(row.inputs), _shapes(row.outputs),
                      f"{row.params:,}" if row.params else "", f"{row.macs / 1e6:.2f}" if row.macs else "")
    console.print(table)
    console.print(f"parameters: {sum(r.params for r in rows):,}")
    console.print(f"multiply-accumulates: {sum(r.macs for r in rows) / 1e9:.3f} G")
    console.print(
        f"peak activation memory: {memory['planned'] / 2**20:.2f} MiB planned in {memory['buffers']} shared buffers "
        f"(+ graph outputs), vs {memory['unplanned'] / 2**20:.2f} MiB with one buffer per tensor"
    )
    line = (f"a forward allocates {needed / 2**20:.2f} MiB (with the layers' work buffers); the memory limit is "
            f"{limit / 2**20:.2f} MiB")
    if needed > limit:
        line += " [red]and forward refuses these shapes[/] (raise it with run's --memory-limit or KUIPER_MEMORY_LIMIT)"
    console.print(line)
    if fused or in_place:
        console.print(f"the copies and fusion passes ({len(graph.unfused_order)} operators -> {len(graph.order)}; "
                      f"`--backend reference` shows the graph as the file has it):")
        for op in fused:
            console.print(f"  {op.name}: " + " + ".join(f"{a.name} ({a.type})" for a in op.absorbed), highlight=False)
        for op in in_place:
            does = "is a view of its input {}" if isinstance(op.layer, ViewLayer) else "overwrites its input {}"
            console.print(f"  {op.name} ({op.type}) " + does.format(op.output_operand.overwrites.name), highlight=False)
    if served:
        console.print("served by custom OpenCL operators:")
        for op, config in served:
            console.print(f"  {op.name} ({op.type}) <- {config}", highlight=False, soft_wrap=True)


def _shapes(shapes: list) -> str:
    return " ".join("x".join(map(str, s)) for s in shapes)


def _draw(graph, path: Path) -> None:
    from kuiper.app import inspection

    if path.suffix == ".mmd":
        path.write_text(inspection.mermaid(graph))
    elif path.suffix == ".dot":
        path.write_text(inspection.dot(graph))
    elif path.suffix in (".svg", ".png"):
        if shutil.which("dot") is None:
            raise CliError(f"drawing {path.suffix} needs graphviz's `dot` program; write .mmd or .dot instead")
        done = subprocess.run(["dot", f"-T{path.suffix[1:]}", "-o", str(path)], input=inspection.dot(graph),
                              text=True, capture_output=True)
        if done.returncode:
            said = (done.stderr.strip().splitlines() or ["no message"])[0]
            raise CliError(f"--graph {path}: graphviz's dot failed (status {done.returncode}): {said}")
    else:
        raise CliError(f"--graph: unknown file type {path.suffix!r} (use .mmd, .dot, .svg or .png)")
