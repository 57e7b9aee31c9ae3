"""The `kuiper` command line: run, inspect, devices, lessons.

Errors print one line and exit with status 1 (2 for a usage error, as argparse does); `--debug`, before or after
the command, shows the traceback instead. Warnings print one line each.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import subprocess
import sys
import time
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

import kuiper
from kuiper.errors import KuiperError
from kuiper.runtime.graph import BACKENDS

SOURCE_MODELS = Path(__file__).resolve().parent.parent / "models"  # a source checkout's; a plain install has none
DEFAULT_MODEL = Path("resnet18", "resnet18.pnnx.param")  # within models/
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class CliError(KuiperError):
    """A command-line usage problem (missing file, bad option value)."""


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error (status 2), or --help or --version (0)
        return e.code
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            args.func(args)
            return 0
        except KeyboardInterrupt:
            print("kuiper: interrupted", file=sys.stderr)
            return 130
        except Exception as e:  # noqa: BLE001 (the promise: one line, whatever went wrong)
            if args.debug:
                raise
            print(f"kuiper: error: {_one_line(e)}", file=sys.stderr)
            return 1


def _one_line(e: Exception) -> str:
    """The error's first line; one kuiper did not raise on purpose says what it is, and where to look."""
    lines = str(e).splitlines() or [""]
    text = lines[0] + (" (--debug shows the rest)" if len(lines) > 1 else "")
    if isinstance(e, (KuiperError, OSError)):
        return text
    return f"{type(e).__name__}: {text} (unexpected: --debug shows where it happened)"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line, without the source line Python would quote."""
    print(f"kuiper: warning: {message}", file=sys.stderr)


def _positive(text: str) -> int:
    """An argparse type: an int of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _shape(text: str) -> tuple:
    """An argparse type: N,C,H,W as ints of at least 1."""
    try:
        return tuple(_positive(d) for d in text.split(","))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (give sizes of at least 1, as in 1,3,224,224)") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kuiper", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kuiper {kuiper.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    common = argparse.ArgumentParser(add_help=False)
    # after the command too; SUPPRESS, so that the command's default does not undo a --debug given before it
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    custom = argparse.ArgumentParser(add_help=False)
    custom.add_argument("--custom-op", action="append", metavar="PATH",
                        help="a custom operator config (.toml) or a directory of them (repeatable; "
                             "adds to KUIPER_CUSTOM_OPS)")
    sub = parser.add_subparsers(title="commands")

    run = sub.add_parser("run", parents=[common, custom], help="run a model (default: the embedded ResNet-18)")
    run.add_argument("model", nargs="?", help="a .pnnx.param file (default: the embedded ResNet-18)")
    run.add_argument("--input", help="a .npy array, or an image (resized and normalized ImageNet-style)")
    run.add_argument("--backend", default="numpy", choices=BACKENDS,
                     help="numpy (default: fast CPU layers, fused), reference (the textbook layers only) or opencl")
    run.add_argument("--device", help="OpenCL device: P:D or a name substring (default: KUIPER_CL_DEVICE, first GPU, first CPU)")
    run.add_argument("--schedule", default="inorder", choices=("inorder", "levels"), help="OpenCL scheduling")
    run.add_argument("--batch", type=_positive, help="run at this batch size (the input is repeated or drawn)")
    run.add_argument("--profile", action="store_true", help="time every operator")
    run.add_argument("--tune", action="store_true",
                     help="opencl: measure each layer's kernel variants once per shape and keep the fastest "
                          "(remembered in KUIPER_TUNING_CACHE, default ~/.cache/kuiper/tuning.json)")
    run.add_argument("--trace", action="store_true", help="print the BFS execution order with meet_num")
    run.add_argument("--topk", type=_positive, default=5, help="how many top logits to show (default 5)")
    run.add_argument("--repeat", type=_positive, default=1, help="run forward this many times, report the median")
    run.add_argument("--threads", type=_positive, metavar="N",
                     help="numpy: split layers over N threads (default: KUIPER_NUM_THREADS, else as many as BLAS uses)")
    run.add_argument("--memory-limit", metavar="SIZE",
                     help="refuse inputs whose plan needs more memory than this, e.g. 2G (default: "
                          "KUIPER_MEMORY_LIMIT, else half of what the process may use)")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of the text")
    run.add_argument("--save", metavar="FILE", help="write the outputs to this .npz (output0, output1, ...)")
    run.set_defaults(func=cmd_run)

    inspect = sub.add_parser("inspect", parents=[common, custom], help="operators, shapes, FLOPs, memory of a model")
    inspect.add_argument("model", nargs="?", help="a .pnnx.param file (default: the embedded ResNet-18)")
    inspect.add_argument("--input-shape", action="append", metavar="N,C,H,W", type=_shape,
                         help="inspect at this input shape (once per graph input)")
    inspect.add_argument("--graph", metavar="FILE", help="draw the graph: .mmd (mermaid), .dot, or .svg/.png via graphviz")
    inspect.add_argument("--backend", default="numpy", choices=BACKENDS,
                         help="show the graph as this backend builds it: numpy (default) after the fusion pass, "
                              "reference as the file has it")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    inspect.set_defaults(func=cmd_inspect)
    devices = sub.add_parser("devices", parents=[common], help="list OpenCL platforms and devices")
    devices.set_defaults(func=cmd_devices)

    lessons = sub.add_parser("lessons", parents=[common], help="list the course's lessons and whether each passes")
    lessons.add_argument("--no-run", action="store_true", help="only list them, without running the checkpoints")
    lessons.set_defaults(func=cmd_lessons)

    lesson = sub.add_parser("lesson", parents=[common], help="run one lesson's checkpoint (kuiper lesson 3)")
    lesson.add_argument("number", type=int, help="the lesson number")
    lesson.add_argument("--output", action="store_true", help="show pytest's output even when it passes")
    lesson.set_defaults(func=cmd_lesson)
    return parser


# ---- devices ------------------------------------------------------------------------------------------
def cmd_devices(args) -> None:
    from kuiper.errors import BackendError
    from kuiper.opencl import devices

    try:
        chosen = devices.select_device().int_ptr
    except BackendError:  # listed below, device by device
        chosen = None
    for p, d, platform, device in devices.all_devices():
        reason = devices.probe(device)
        mark = "*" if device.int_ptr == chosen else " "
        state = "usable" if reason is None else f"NOT usable: {reason}"
        print(f"{mark} {p}:{d}  {platform.name.strip()} / {state} / " + ", ".join(
            f"{k}: {v}" for k, v in devices.describe(device).items()))
    if chosen is None:
        print("no usable device: backend='opencl' cannot run here; " + devices.CPU_REMEDY)
    else:
        print("* = the device backend='opencl' picks now (set KUIPER_CL_DEVICE=P:D or a name to choose)")


def _console():
    """rich's console for our output. When the output is not a terminal, rich would assume 80 columns, break
    long lines in the middle of a shape and cut table cells short (1x64x112x1...): soft wrap keeps lines whole,
    and a console as wide as any table gives every cell its whole width."""
    from rich.console import Console

    console = Console(soft_wrap=True)
    if not console.is_terminal:
        console.width = 10_000
    return console


# ---- run --------------------------------------------------------------------------------------------
def cmd_run(args) -> None:
    console = _console()
    param = Path(args.model) if args.model else default_model()
    _require(param, "model")
    if args.threads is not None:
        kuiper.set_num_threads(args.threads)
    graph = kuiper.load(param, backend=args.backend, device=args.device, schedule=args.schedule,
                        custom_ops=args.custom_op, tuning="measure" if args.tune else None,
                        memory_limit=args.memory_limit)
    inputs, reference = _inputs_for(graph, param, args)
    device = graph.runtime.device.name.strip() if graph.runtime is not None else None
    threads = kuiper.num_threads() if args.backend == "numpy" else None  # the reference backend runs on one
    if not args.json:
        where = args.backend + (f" ({device})" if device else "") + (f", {threads} thread(s)" if threads else "")
        shapes = ", ".join("x".join(map(str, x.shape)) for x in inputs)
        console.print(f"[bold]{param.name}[/] on [bold]{where}[/], input {shapes}")

    times = []
    # --trace prints as it runs: with --json its lines go into the object instead, to keep stdout one JSON value
    with contextlib.redirect_stdout(io.StringIO()) if args.json else contextlib.nullcontext():
        for i in range(args.repeat):
            started = time.perf_counter()
            outputs = graph.forward(*inputs, trace=args.trace and i == 0, profile=args.profile)
            times.append(time.perf_counter() - started)
    if args.save:
        np.savez(args.save, **{f"output{k}": out for k, out in enumerate(outputs)})
    match = _match(outputs, reference) if reference is not None else None
    if args.json:
        print(json.dumps({
            "model": str(param), "backend": args.backend, "device": device, "threads": threads,
            "inputs": [list(x.shape) for x in inputs], "forward_ms": float(np.median(times)) * 1e3,
            "repeat": args.repeat, "outputs": [_output_summary(out, args.topk) for out in outputs],
            "reference": None if match is None else {"matches": match[0], "max_abs_diff": _finite(match[1])},
            **({"trace": graph.last_trace} if args.trace else {}),
            **({"profile": _profile_rows(graph)} if args.profile else {}),
        }))
    else:
        console.print(f"forward: {np.median(times) * 1e3:.2f} ms" + (f" (median of {len(times)})" if len(times) > 1 else ""))
        for k, out in enumerate(outputs):
            _print_output(console, k, out, args.topk)
        if match is not None:
            verdict = "[green]matches[/]" if match[0] else "[red]DOES NOT match[/]"
            console.print(f"{verdict} the saved PyTorch output (max abs diff {match[1]:.2e})")
        if args.profile:
            _print_profile(console, graph)
    if match is not None and not match[0]:
        raise CliError("output differs from the saved PyTorch reference")


def _inputs_for(graph, param: Path, args):
    """The arrays to run, and PyTorch's outputs for them when the export tool saved some."""
    if args.input:
        path = Path(args.input)
        _require(path, "input")
        try:
            x = np.load(path) if path.suffix == ".npy" else _load_image(path)
        except (OSError, ValueError, EOFError) as e:  # not an array, or an image Pillow cannot read
            raise CliError(f"--input {path}: cannot read it ({e})") from None
        if args.batch:
            x = np.ascontiguousarray(np.repeat(x[:1], args.batch, axis=0))
        return [x], None
    case = _saved_case(param, args.batch or None)
    if case is not None:
        return case
    rng = np.random.default_rng(0)
    inputs = []
    for op in graph.input_operators:
        shape = op.output_operand.shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise CliError(f"input '{op.name}' has no fixed shape in the .param: give --input")
        shape = (args.batch or shape[0],) + tuple(shape[1:])
        inputs.append(rng.standard_normal(shape, dtype=np.float32))
    return inputs, None


def _saved_case(param: Path, batch):
    """A case saved next to a committed model (models/manifest.json) whose batch matches, if any."""
    manifest_path = param.resolve().parent.parent / "manifest.json"
    if not manifest_path.exists():
        return None
    manifest = json.loads(manifest_path.read_text())
    for entry in [*manifest["models"].values(), *manifest.get("custom_op_models", {}).values()]:
        if (manifest_path.parent / entry["param"]).resolve() != param.resolve():
            continue
        for case in entry["cases"]:
            if not all((manifest_path.parent / p).exists() for p in case["inputs"] + case["outputs"]):
                continue  # a plain install carries the embedded model's batch-1 case only
            inputs = [np.load(manifest_path.parent / p) for p in case["inputs"]]
            if batch is None or inputs[0].shape[0] == batch:
                return inputs, [np.load(manifest_path.parent / p) for p in case["outputs"]]
    return None


def _load_image(path: Path) -> np.ndarray:
    """Resize the short side to 256, crop the centre 224x224, scale to [0,1], normalize with ImageNet stats."""
    try:
        from PIL import Image
    except ImportError:
        raise CliError("reading images needs Pillow: pip install 'kuiper[image]'") from None
    image = Image.open(path).convert("RGB")
    scale = 256 / min(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)), Image.BILINEAR)
    left, top = (image.width - 224) // 2, (image.height - 224) // 2
    image = image.crop((left, top, left + 224, top + 224))
    x = (np.asarray(image, dtype=np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def _print_output(console, k: int, out: np.ndarray, topk: int) -> None:
    console.print(f"output {k}: shape {tuple(out.shape)}, mean {out.mean():.6f}, std {out.std():.6f}")
    if out.ndim == 2:
        for n, row in enumerate(out[:4]):
            best = np.argsort(row)[::-1][:topk]
            console.print(f"  item {n} top-{topk}: " + "  ".join(f"{i}:{row[i]:.4f}" for i in best))


def _match(outputs: list, reference: list) -> tuple:
    """(whether the outputs match PyTorch's, the largest absolute difference; inf where a shape differs)."""
    ok = len(outputs) == len(reference)
    worst = 0.0
    for out, ref in zip(outputs, reference):
        tolerance = 1e-4 * max(1.0, float(np.abs(ref).max()))
        diff = float(np.abs(out - ref).max()) if out.shape == ref.shape else float("inf")
        worst = max(worst, diff)
        ok = ok and out.shape == ref.shape and bool(np.allclose(out, ref, rtol=1e-4, atol=tolerance))
    return ok, worst


def _finite(x) -> float | None:
    """A float for JSON, which has no NaN or infinity: those become null."""
    x = float(x)
    return x if np.isfinite(x) else None


def _output_summary(out: np.ndarray, topk: int) -> dict:
    summary = {"shape": list(out.shape), "dtype": str(out.dtype)}
    summary.update({k: _finite(f(out)) for k, f in
                    (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max))})
    if out.ndim == 2:  # one row of logits per item: its best classes, best first
        best = np.argsort(out, axis=1)[:, ::-1][:, :topk]
        summary["topk"] = {"indices": best.tolist(),
                           "values": [[_finite(v) for v in row] for row in np.take_along_axis(out, best, 1)]}
    return summary


def _profile_rows(graph) -> list:
    """forward(profile=True)'s times per operator, in ms (device_ms: null off OpenCL)."""
    return [{"operator": op.name, "type": op.type, "variant": graph.last_variants.get(op.name, ""),
             "host_ms": host * 1e3, "device_ms": None if device is None else device * 1e3}
            for op, host, device in graph.last_profile]


def _print_profile(console, graph) -> None:
    """Per-operator and per-type tables; on OpenCL the device time from profiling events sits beside
    the host time (the host only enqueues, so its column shows the Python cost of each operator)."""
    from rich.table import Table

    from kuiper.inspection import profile_by_type

    on_device = graph.runtime is not None
    total = sum((d if on_device else h) for _, h, d in graph.last_profile) or 1e-12
    columns = ["host ms"] + (["device ms"] if on_device else []) + ["%"]

    def cells(host, device):
        share = (device if on_device else host) / total
        return [f"{host * 1e3:.3f}"] + ([f"{device * 1e3:.3f}"] if on_device else []) + [f"{100 * share:.1f}"]

    table = Table(title="time per operator (last forward)")
    names = ["operator", "type", "variant"]  # the variant chosen for the shape (kuiper/variants.py)
    for col in names + columns:
        table.add_column(col, justify="left" if col in names else "right")
    for op, host, device in graph.last_profile:
        table.add_row(op.name, op.type, graph.last_variants.get(op.name, ""), *cells(host, device))
    console.print(table)
    by_type = Table(title="time per type")
    for col in ["type", "count"] + columns:
        by_type.add_column(col, justify="left" if col == "type" else "right")
    for type_, (count, host, device) in profile_by_type(graph.last_profile).items():
        by_type.add_row(type_, str(count), *cells(host, device))
    console.print(by_type)


# ---- inspect ----------------------------------------------------------------------------------------
def cmd_inspect(args) -> None:
    from rich.table import Table

    from kuiper import inspection
    from kuiper.runtime.graph import RuntimeGraph

    console = _console()
    param = Path(args.model) if args.model else default_model()
    _require(param, "model")
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
        console.print(f"the fusion pass ({len(graph.unfused_order)} operators -> {len(graph.order)}; "
                      f"`--backend reference` shows the graph as the file has it):")
        for op in fused:
            console.print(f"  {op.name}: " + " + ".join(f"{a.name} ({a.type})" for a in op.absorbed), highlight=False)
        for op in in_place:
            console.print(f"  {op.name} ({op.type}) overwrites its input {op.output_operand.overwrites.name}",
                          highlight=False)
    if served:
        console.print("served by custom OpenCL operators:")
        for op, config in served:
            console.print(f"  {op.name} ({op.type}) <- {config}", highlight=False, soft_wrap=True)


def _shapes(shapes: list) -> str:
    return " ".join("x".join(map(str, s)) for s in shapes)


def _draw(graph, path: Path) -> None:
    from kuiper import inspection

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


# ---- lessons ----------------------------------------------------------------------------------------
def cmd_lessons(args) -> None:
    from kuiper import course

    failing = course.print_lessons(run=not args.no_run)
    if failing:
        raise course.CourseError(f"{failing} lesson checkpoint(s) do not pass: `kuiper lesson N` shows why")


def cmd_lesson(args) -> None:
    from kuiper import course

    outcome = course.print_lesson(args.number, show_output=args.output)
    if not outcome.ok:
        raise course.CourseError(f"lesson {args.number}'s checkpoint does not pass ({outcome.summary()})")


def default_model() -> Path:
    """The embedded ResNet-18: the source checkout's models/ when kuiper runs from one, else the copy that a
    plain install carries as package data (setup.py maps models/ onto kuiper.models)."""
    source = SOURCE_MODELS / DEFAULT_MODEL
    if source.exists():  # not just models/: another distribution may have put a models/ in site-packages
        return source
    return Path(resources.files("kuiper")) / "models" / DEFAULT_MODEL


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise CliError(f"{what} file not found: {path}")


if __name__ == "__main__":
    sys.exit(main())
