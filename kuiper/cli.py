"""The `kuiper` command line: run, inspect, export, devices, lessons, generate, chat.

The language-model commands (generate, chat, inspect of a model directory) live in kuiper/llm/commands.py.

Errors print one line and exit with status 1 (2 for a usage error, as argparse does); `--debug`, before or after
the command, shows the traceback instead. Warnings print one line each.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import kuiper
from kuiper import folder, images, labels, references
from kuiper.cpu.blas import restart_if_misread
from kuiper.errors import ConfigError, KuiperError
from kuiper.folder import json_float
from kuiper.layers.reshape import ViewLayer
from kuiper.runtime.graph import BACKENDS
from kuiper.shipped import shipped

DEFAULT_MODEL = Path("resnet18", "resnet18.pnnx.param")  # within models/
FOLDER_BATCH = 8  # images per forward in a folder run, unless --batch says otherwise
RANDOM_WEIGHTS_NOTE = ("note: this model's weights are random (it was exported untrained: nothing could be "
                       "downloaded), so its classes for a real image are meaningless; export a trained model with "
                       "kuiper export FILE.py:FUNCTION")


class CliError(KuiperError):
    """A command-line usage problem (missing file, bad option value)."""


def main(argv=None) -> int:
    if argv is None:  # the process is kuiper's own: give numpy's BLAS its AVX-512 kernels if it misread the CPU
        restart_if_misread()
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
    run.add_argument("--input", action="append", metavar="X.npy|IMAGE|FOLDER",
                     help="a .npy array or an image (prepared as ImageNet classifiers expect: kuiper/images.py), "
                          "once per model input, in order; or one folder: every image in it, in batches")
    run.add_argument("--backend", default="numpy", choices=BACKENDS,
                     help="numpy (default: fast CPU layers, fused), reference (the textbook layers only) or opencl")
    run.add_argument("--device", help="OpenCL device: P:D or a name substring (default: KUIPER_CL_DEVICE, first GPU, first CPU)")
    run.add_argument("--schedule", default="inorder", choices=("inorder", "levels"), help="OpenCL scheduling")
    run.add_argument("--precision", default="fp32", choices=("fp32", "fp16"),
                     help="opencl: store tensors and weights as fp32 (default) or fp16 (kernels compute in float)")
    run.add_argument("--batch", type=_positive,
                     help="run at this batch size (the input is repeated or drawn); with a folder, images per "
                          f"forward (default {FOLDER_BATCH})")
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
    run.add_argument("--out", metavar="FILE",
                     help="with image input: one row per image, .csv (path, index, label, score, top-k indices) "
                          "or .jsonl (path and top-k indices, labels, values)")
    run.add_argument("--labels", metavar="FILE",
                     help="class names, one per line (default: ImageNet's for an output of 1000 classes)")
    prep = run.add_argument_group("image preparation (default: ImageNet's, as torchvision's classifiers expect)")
    prep.add_argument("--resize", metavar="PIXELS",
                      help="resize the short side to this (default 256; 8/7 of a fixed square input's side)")
    prep.add_argument("--crop", metavar="PIXELS",
                      help="then cut the centred square of this side (default 224, or the model's fixed input side)")
    prep.add_argument("--mean", metavar="R,G,B",
                      help="subtract per channel, on values in [0, 1] (default 0.485,0.456,0.406)")
    prep.add_argument("--std", metavar="R,G,B",
                      help="then divide per channel (default 0.229,0.224,0.225)")
    run.set_defaults(func=cmd_run)

    inspect = sub.add_parser("inspect", parents=[common, custom], help="operators, shapes, FLOPs, memory of a model")
    inspect.add_argument("model", nargs="?", help="a .pnnx.param file, or a language model's directory "
                                                  "(default: the embedded ResNet-18)")
    inspect.add_argument("--input-shape", action="append", metavar="N,C,H,W", type=_shape,
                         help="inspect at this input shape (once per graph input)")
    inspect.add_argument("--graph", metavar="FILE", help="draw the graph: .mmd (mermaid), .dot, or .svg/.png via graphviz")
    inspect.add_argument("--backend", default="numpy", choices=BACKENDS,
                         help="show the graph as this backend builds it: numpy (default) after the fusion pass, "
                              "reference as the file has it")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    inspect.set_defaults(func=cmd_inspect)

    export = sub.add_parser("export", parents=[common],
                            help="export a PyTorch model to PNNX and check kuiper against PyTorch on it "
                                 '(needs pip install "kuiper[export]")')
    export.add_argument("spec", metavar="SPEC",
                        help="torchvision:NAME (a classification or segmentation model, random weights) or "
                             "FILE.py:FUNCTION (a function returning your torch.nn.Module)")
    export.add_argument("--input-shape", action="append", metavar="N,C,H,W", type=_shape,
                        help="trace at this input shape, once per model input (default 1,3,224,224)")
    export.add_argument("--out", metavar="DIR", help="where the files go (default: ./NAME)")
    export.add_argument("--name", help="the files' name (default: the model's or the function's name)")
    export.add_argument("--randomize", action="store_true",
                        help="give normalization statistics and layer scales random values first, which show "
                             "a wrong layer that a fresh model's trivial ones would hide")
    export.add_argument("--backend", default="numpy", choices=BACKENDS, help="the backend that checks it")
    export.set_defaults(func=cmd_export)

    devices = sub.add_parser("devices", parents=[common], help="list OpenCL platforms and devices")
    devices.set_defaults(func=cmd_devices)

    lessons = sub.add_parser("lessons", parents=[common], help="list the course's lessons and whether each passes")
    lessons.add_argument("--no-run", action="store_true", help="only list them, without running the checkpoints")
    lessons.set_defaults(func=cmd_lessons)

    lesson = sub.add_parser("lesson", parents=[common], help="run one lesson's checkpoint (kuiper lesson 3)")
    lesson.add_argument("number", type=int, help="the lesson number")
    lesson.add_argument("--output", action="store_true", help="show pytest's output even when it passes")
    lesson.set_defaults(func=cmd_lesson)

    from kuiper.llm import commands as llm_commands

    llm_commands.add_parsers(sub, common)  # generate, chat
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
    sources = [Path(p) for p in args.input or []]
    for path in sources:
        _require(path, "input")
    if args.out and Path(args.out).suffix not in folder.ROW_FORMATS:
        raise CliError(f"--out {args.out}: unknown file type {Path(args.out).suffix!r} "
                       f"(use {' or '.join(folder.ROW_FORMATS)})")
    if args.threads is not None:
        kuiper.set_num_threads(args.threads)
    graph = kuiper.load(param, backend=args.backend, device=args.device, schedule=args.schedule,
                        custom_ops=args.custom_op, tuning="measure" if args.tune else None,
                        memory_limit=args.memory_limit, precision=args.precision)
    names = labels.read_names(args.labels) if args.labels else None
    record = references.saved(param)
    random_weights = bool(record and record.random_weights)
    if args.out or any(path.is_dir() for path in sources):
        _run_images(console, graph, param, sources, names, random_weights, args)
        return

    inputs, reference = _inputs_for(graph, param, sources, args)
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
    try:
        labels.check_names(names, outputs)
    except ConfigError as e:
        raise CliError(f"--labels {args.labels}: {e}") from None
    tolerance = references.TOLERANCES[args.precision]
    match = references.compare(outputs, reference, tolerance) if reference is not None else None
    # the note is about what a real image's classes mean: said only when an image went in
    note = random_weights and any(_is_image_input(path) for path in sources)
    if args.json:
        print(json.dumps({
            "model": str(param), "backend": args.backend, "device": device, "threads": threads,
            "inputs": [list(x.shape) for x in inputs], "forward_ms": float(np.median(times)) * 1e3,
            "repeat": args.repeat, "outputs": [_output_summary(out, args.topk, names) for out in outputs],
            "reference": None if match is None else {"matches": match.ok, "max_abs_diff": json_float(match.max_abs)},
            "random_weights": random_weights,
            **({"trace": graph.last_trace} if args.trace else {}),
            **({"profile": _profile_rows(graph)} if args.profile else {}),
        }))
    else:
        console.print(f"forward: {np.median(times) * 1e3:.2f} ms" + (f" (median of {len(times)})" if len(times) > 1 else ""))
        for k, out in enumerate(outputs):
            _print_output(console, k, out, args.topk, names)
        if match is not None:
            verdict = "[green]matches[/]" if match.ok else "[red]DOES NOT match[/]"
            within = f", allowed {tolerance:g} of its largest value at {args.precision}" if args.precision != "fp32" else ""
            console.print(f"{verdict} the saved PyTorch output (max abs diff {match.max_abs:.2e}{within})")
        if note:
            console.print(RANDOM_WEIGHTS_NOTE, highlight=False)
        if args.profile:
            _print_profile(console, graph)
    if match is not None and not match.ok:
        raise CliError("output differs from the saved PyTorch reference")


def _inputs_for(graph, param: Path, sources: list, args):
    """The arrays to run (one per --input, else the saved case, else random ones), and PyTorch's outputs for
    them when the model was exported with some (references.py)."""
    if sources and len(sources) != len(graph.input_operators):
        raise CliError(f"--input is given {len(sources)} time(s), the model has {len(graph.input_operators)} "
                       f"input(s)")
    if not any(_is_image_input(path) for path in sources):
        _no_preparation_without_images(args)
    if sources:
        inputs = [_read_input(path, op, args) for path, op in zip(sources, graph.input_operators)]
        if args.batch:
            inputs = [np.ascontiguousarray(np.repeat(x[:1], args.batch, axis=0)) for x in inputs]
            return inputs, None
        return inputs, references.outputs_for(param, sources)  # the saved case's own files: check them too
    case = references.saved_case(param, args.batch or None)
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


def _is_image_input(path: Path) -> bool:
    return path.suffix != ".npy"  # whatever is not an array is read as an image (Pillow knows many formats)


def _read_input(path: Path, op, args) -> np.ndarray:
    """A .npy file as it is; anything else as an image, prepared for graph input `op`."""
    if _is_image_input(path):
        return images.load_image(path, _preparation(op, args))
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError) as e:  # not an array
        raise CliError(f"--input {path}: cannot read it ({e})") from None


PREPARATION = ("resize", "crop", "mean", "std")


def _preparation(op, args) -> images.Preprocess:
    """ImageNet's preparation, scaled to the input's side where the .param fixes a square one other than 224
    (inception_v3's 299), with what --resize, --crop, --mean and --std change."""
    base = images.Preprocess.for_shape(op.output_operand.shape)
    given = {name: _preparation_value(name, getattr(args, name)) for name in PREPARATION
             if getattr(args, name) is not None}
    resize, crop = given.get("resize", base.resize), given.get("crop", base.crop)
    if crop > resize:  # each valid alone, they do not fit together
        said = lambda name, value: f"--{name} {value}" + ("" if name in given else " (the default)")
        raise CliError(f"{said('crop', crop)} is larger than {said('resize', resize)}: the crop must fit in the "
                       f"resized image")
    return dataclasses.replace(base, **given)


def _preparation_value(name: str, text: str):
    """--resize/--crop: pixels, at least 1; --mean/--std: R,G,B (or one number for all three), std above 0."""
    if name in ("resize", "crop"):
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise CliError(f"--{name} {text!r}: give a whole number of pixels, at least 1")
        return value
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) not in (1, 3) or not all(np.isfinite(values)):
        raise CliError(f"--{name} {text!r}: give three numbers R,G,B (or one for all three)")
    if name == "std" and not all(v > 0 for v in values):
        raise CliError(f"--std {text!r}: every channel's std must be above 0 (it divides)")
    return values * 3 if len(values) == 1 else values


def _no_preparation_without_images(args) -> None:
    given = [f"--{name}" for name in PREPARATION if getattr(args, name) is not None]
    if given:
        raise CliError(f"{' '.join(given)} prepare images: give --input IMAGE or a folder of them")


def _run_images(console, graph, param: Path, sources: list, names, random_weights: bool, args) -> None:
    """--input FOLDER, or --out with an image: the images in batches, one row of classes per image."""
    if len(sources) != 1 or len(graph.input_operators) != 1:
        raise CliError(f"a folder of images (or --out) needs a model with one input and one --input; the model "
                       f"has {len(graph.input_operators)} input(s) and --input is given {len(sources)} time(s)")
    source = sources[0]
    if not source.is_dir() and not _is_image_input(source):
        raise CliError(f"--out writes one row per image: --input {source} is not an image or a folder of them")
    for option in ("save", "profile", "trace"):
        if getattr(args, option):
            raise CliError(f"--{option} takes one forward: run a single image without --out for it")
    paths = images.find_images(source) if source.is_dir() else [source]
    pre = _preparation(graph.input_operators[0], args)
    batch = args.batch or FOLDER_BATCH
    with _progress(len(paths), show=not args.json) as advance:
        run = folder.classify(graph, paths, pre, batch, args.topk, names, on_progress=advance)
    if args.out:
        folder.write_rows(Path(args.out), run.rows)
    if args.json:
        print(json.dumps({
            "model": str(param), "backend": args.backend, "images": len(paths), "batch": batch,
            "skipped": [str(p) for p in run.skipped], "random_weights": random_weights, "out": args.out,
            **({} if args.out else {"rows": [folder.row_dict(row) for row in run.rows]}),
        }))
        return
    if not args.out:
        for row in run.rows:
            console.print(f"{row.path}: " + _classes(row.indices, row.values, row.labels), highlight=False)
    skipped = f", {len(run.skipped)} skipped (unreadable)" if run.skipped else ""
    console.print(f"{len(run.rows)} image(s) of {source} through {param.name} in batches of {batch}{skipped}"
                  + (f"; rows written to {args.out}" if args.out else ""), highlight=False)
    if random_weights:
        console.print(RANDOM_WEIGHTS_NOTE, highlight=False)


@contextlib.contextmanager
def _progress(total: int, show: bool):
    """A progress bar over `total` images on stderr (not where the results go); none when stderr is not a
    terminal or the output is JSON. Yields the function that advances it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    bar = Progress(TextColumn("images"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, transient=True, disable=not (show and console.is_terminal))
    with bar:
        task = bar.add_task("images", total=total)
        yield lambda n: bar.advance(task, n)


def _classes(indices, values, names) -> str:
    """Top-k as `281 tabby (12.346), ...` with names, `281:12.346  ...` without (5 significant digits: an
    untrained model's scores may all be below 1e-6)."""
    if names is None:
        return "  ".join(f"{i}:{v:.5g}" for i, v in zip(indices, values))
    return ", ".join(f"{i} {name} ({v:.5g})" for i, name, v in zip(indices, names, values))


def _print_output(console, k: int, out: np.ndarray, topk: int, names=None) -> None:
    console.print(f"output {k}: shape {tuple(out.shape)}, mean {out.mean():.6g}, std {out.std():.6g}")
    if out.ndim == 2:
        classes = labels.names_for(out, names)
        indices, values = labels.top_k(out[:4], topk)
        for n, (row_indices, row_values) in enumerate(zip(indices, values)):
            row_names = None if classes is None else [classes[i] for i in row_indices]
            console.print(f"  item {n} top-{len(row_indices)}: " + _classes(row_indices, row_values, row_names),
                          highlight=False)


def _output_summary(out: np.ndarray, topk: int, names=None) -> dict:
    summary = {"shape": list(out.shape), "dtype": str(out.dtype)}
    summary.update({k: json_float(f(out)) for k, f in
                    (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max))})
    if out.ndim == 2:  # one row of scores per item: its best classes, best first
        indices, values = labels.top_k(out, topk)
        summary["topk"] = {"indices": indices.tolist(), "values": [[json_float(v) for v in row] for row in values]}
        classes = labels.names_for(out, names)
        if classes is not None:
            summary["topk"]["labels"] = [[classes[i] for i in row] for row in indices]
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

    from kuiper.llm import commands as llm_commands

    console = _console()
    if llm_commands.is_model_dir(args.model):
        llm_commands.inspect(args, console)
        return
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


# ---- export -----------------------------------------------------------------------------------------
def cmd_export(args) -> None:
    from kuiper import export as exporting

    exporting.require()  # before anything else: without torch and pnnx, say what to install
    name = args.name or exporting.default_name(args.spec)
    out = Path(args.out) if args.out else Path(name)
    shapes = args.input_shape or [exporting.default_shape(args.spec)]
    # a model from torchvision here has random weights (nothing is downloaded); --randomize makes any random
    random_weights = args.spec.startswith("torchvision:") or args.randomize
    with _phases() as phase:
        phase(f"building {args.spec}")
        module = exporting.build_module(args.spec)
        if args.randomize:
            exporting.randomize(module, seed=0)
        done = exporting.export(module, shapes, out, name, progress=phase, spec=args.spec,
                                random_weights=random_weights)
        phase(f"checking kuiper ({args.backend}) against PyTorch")
        checked = exporting.check(done.param, done.inputs, done.outputs, backend=args.backend)

    console = _console()
    files = [(f"{done.param.name}, {done.bin.name}", "the graph and its weights"),
             (", ".join(p.name for p in done.inputs + done.outputs), "a sample input and PyTorch's output for it"),
             (done.record.name, "versions, shapes, files")]
    console.print(f"exported {args.spec} at input {', '.join('x'.join(map(str, s)) for s in shapes)} "
                  f"to {done.param.parent}:", highlight=False)
    for names, what in files:
        console.print(f"  {names}  ({what})", highlight=False)
    if checked.missing:
        console.print(f"[red]kuiper has no layer for {len(checked.missing)} operator type(s) of this model:[/]")
        for type_, ops in checked.missing.items():
            console.print(f"  {type_}: {len(ops)} operator(s) ({', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''})",
                          highlight=False)
        raise CliError(f"kuiper cannot run {name} yet: {len(checked.missing)} operator type(s) have no layer "
                       f"(a custom operator can serve one: lesson 18)")
    if checked.error:
        raise CliError(f"kuiper cannot run {name}: {checked.error}")
    for k, diff in enumerate(checked.comparison.diffs):
        verdict = "[green]matches[/]" if diff.ok else "[red]DOES NOT match[/]"
        console.print(f"output {k}: kuiper ({args.backend}) {verdict} PyTorch (max abs diff {diff.max_abs:.2e}, "
                      f"{diff.relative:.1e} of PyTorch's largest value)")
    if not checked.ok:
        raise CliError(f"kuiper's output differs from PyTorch's on {name} (max abs diff "
                       f"{checked.comparison.max_abs:.2e})")
    console.print(f"run it: kuiper run {done.param} --input IMAGE", highlight=False)
    if random_weights:
        console.print("note: its weights are random, so its classes for a real image are meaningless; a "
                      "FILE.py:FUNCTION can load trained ones", highlight=False)


@contextlib.contextmanager
def _phases():
    """A spinner with the current phase on stderr while exporting; yields the function that sets the phase.
    pnnx sends its own printing (file descriptors 1 and 2) to a log meanwhile, so the spinner writes to a copy
    of stderr made before that. None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield lambda phase: None
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    spinner = Spinner("dots", text="starting")
    with os.fdopen(os.dup(sys.stderr.fileno()), "w") as stream:
        # Live prints what Python writes meanwhile (a warning) above the spinner; while pnnx runs, its log
        # takes that too (kuiper.export.output_to)
        with Live(spinner, console=Console(file=stream), transient=True, refresh_per_second=12):
            yield lambda phase: spinner.update(text=f"{phase} ...")


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
    """The embedded ResNet-18, from the checkout's models/ or the copy an install carries (kuiper/shipped.py)."""
    return shipped("models") / DEFAULT_MODEL


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise CliError(f"{what} file not found: {path}")


if __name__ == "__main__":
    sys.exit(main())
