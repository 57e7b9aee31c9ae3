"""`kuiper run`: a model on arrays, images or a folder of images; outputs, classes, the check against the
outputs PyTorch saved, profiles."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import time
from pathlib import Path

import numpy as np

import kuiper
from kuiper.app import accuracy, folder, images, labels, model_preprocess, references
from kuiper.app.cli.common import BACKEND_HELP, CliError, default_model, positive, require, rich_console, say_backend
from kuiper.app.folder import json_float
from kuiper.core.errors import ConfigError
from kuiper.runtime.auto import AUTO, CHOICES
from kuiper.runtime.memory import format_bytes

FOLDER_BATCH = 8  # images per forward in a folder run, unless --batch says otherwise
RANDOM_WEIGHTS_NOTE = ("note: this model's weights are random (it was exported untrained: nothing could be "
                       "downloaded), so its classes for a real image are meaningless; export a trained model with "
                       "kuiper export FILE.py:FUNCTION")


def add_parser(sub, common, custom) -> None:
    """The run command and its options."""
    run = sub.add_parser("run", parents=[common, custom], help="run a model (default: the embedded ResNet-18)")
    run.add_argument("model", nargs="?", help="a .pnnx.param file (default: the embedded ResNet-18)")
    run.add_argument("--input", action="append", metavar="X.npy|IMAGE|FOLDER",
                     help="a .npy array or an image (prepared as ImageNet classifiers expect: kuiper/app/images.py), "
                          "once per model input, in order; or one folder: every image in it, in batches")
    run.add_argument("--backend", default=AUTO, choices=CHOICES, help=BACKEND_HELP)
    run.add_argument("--device", help="OpenCL device: P:D or a name substring (default: KUIPER_CL_DEVICE, first GPU, first CPU)")
    run.add_argument("--schedule", default="inorder", choices=("inorder", "levels"), help="OpenCL scheduling")
    run.add_argument("--precision", default="fp32", choices=tuple(references.TOLERANCES),
                     help="opencl: store tensors and weights as fp32 (default) or fp16 (kernels compute in float); "
                          "tf32: fp32, with products on NVIDIA tensor cores at TF32")
    run.add_argument("--batch", type=positive,
                     help="run at this batch size (the input is repeated or drawn); with a folder, images per "
                          f"forward (default {FOLDER_BATCH})")
    run.add_argument("--profile", action="store_true", help="time every operator")
    run.add_argument("--tune", action="store_true",
                     help="opencl: measure each layer's kernel variants once per shape and keep the fastest "
                          "(remembered in KUIPER_TUNING_CACHE, default ~/.cache/kuiper/tuning.json)")
    run.add_argument("--trace", action="store_true", help="print the BFS execution order with meet_num")
    run.add_argument("--topk", type=positive, default=5, help="how many top logits to show (default 5)")
    run.add_argument("--repeat", type=positive, default=1, help="run forward this many times, report the median")
    run.add_argument("--threads", type=positive, metavar="N",
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
                     help="class names, one per line (default: the model's preprocess.json's, else ImageNet's for an output "
                          "of 1000 classes)")
    run.add_argument("--plot", metavar="FILE",
                     help="with a labelled folder (DIR/<class>/*.png): draw the confusion matrix as this .png")
    prep = run.add_argument_group("image preparation (default: the model's preprocess.json where it has one, else "
                                  "ImageNet's, as torchvision's classifiers expect)")
    prep.add_argument("--resize", metavar="PIXELS",
                      help="resize the short side to this (default 256; 8/7 of a fixed square input's side)")
    prep.add_argument("--crop", metavar="PIXELS",
                      help="then cut the centred square of this side (default 224, or the model's fixed input side)")
    prep.add_argument("--mean", metavar="R,G,B",
                      help="subtract per channel, on values in [0, 1] (default 0.485,0.456,0.406)")
    prep.add_argument("--std", metavar="R,G,B",
                      help="then divide per channel (default 0.229,0.224,0.225)")
    run.set_defaults(func=cmd_run)


def cmd_run(args) -> None:
    console = rich_console()
    param = Path(args.model) if args.model else default_model()
    require(param, "model")
    if param.is_dir():
        language_model = (param / "config.json").is_file()
        raise CliError(f"{param}: " + ("a language model's directory: kuiper generate or kuiper chat runs it"
                                        if language_model else "a directory: give a model's .pnnx.param file"))
    sources = [Path(p) for p in args.input or []]
    for path in sources:
        require(path, "input")
    if args.out and Path(args.out).suffix not in folder.ROW_FORMATS:
        raise CliError(f"--out {args.out}: unknown file type {Path(args.out).suffix!r} "
                       f"(use {' or '.join(folder.ROW_FORMATS)})")
    if args.threads is not None:
        kuiper.set_num_threads(args.threads)
    graph = kuiper.load(param, backend=args.backend, device=args.device, schedule=args.schedule,
                        custom_ops=args.custom_op, tuning="measure" if args.tune else None,
                        memory_limit=args.memory_limit, precision=args.precision)
    say_backend(graph)
    own = model_preprocess.read(param, model_preprocess.input_channels(graph))
    names_file = args.labels or (own.labels if own else None)
    names = labels.read_names(names_file) if names_file else None
    record = references.saved(param)
    random_weights = bool(record and record.random_weights)
    if args.plot and not (len(sources) == 1 and sources[0].is_dir()):
        raise CliError("--plot draws a labelled folder's confusion matrix: give --input DIR of class subfolders")
    if args.out or any(path.is_dir() for path in sources):
        _run_images(console, graph, param, sources, names, random_weights, args, own)
        return

    inputs, reference = _inputs_for(graph, param, sources, args, own)
    device = graph.runtime.device.name.strip() if graph.runtime is not None else None
    threads = kuiper.num_threads() if graph.backend == "numpy" else None  # the reference backend runs on one
    if not args.json:
        where = graph.backend + (f" ({device})" if device else "") + (f", {threads} thread(s)" if threads else "")
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
        _save(args.save, outputs)
    try:
        labels.check_names(names, outputs)
    except ConfigError as e:
        raise CliError(f"{f'--labels {args.labels}' if args.labels else names_file}: {e}") from None
    tolerance = references.TOLERANCES[args.precision]
    match = references.compare(outputs, reference, tolerance) if reference is not None else None
    # the note is about what a real image's classes mean: said only when an image went in
    note = random_weights and any(_is_image_input(path) for path in sources)
    if args.json:
        print(json.dumps({
            "model": str(param), "backend": graph.backend, "device": device, "threads": threads,
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


def _inputs_for(graph, param: Path, sources: list, args, own):
    """The arrays to run (one per --input, else the saved case, else random ones), and PyTorch's outputs for
    them when the model was exported with some (references.py)."""
    if sources and len(sources) != len(graph.input_operators):
        raise CliError(f"--input is given {len(sources)} time(s), the model has {len(graph.input_operators)} "
                       f"input(s)")
    if not any(_is_image_input(path) for path in sources):
        _no_preparation_without_images(args)
    if sources:
        inputs = [_read_input(path, op, args, own) for path, op in zip(sources, graph.input_operators)]
        if args.batch:
            _batch_fits(graph, args.batch, [(x.shape[1:], x.dtype.itemsize) for x in inputs])
            inputs = [np.ascontiguousarray(np.repeat(x[:1], args.batch, axis=0)) for x in inputs]
            return inputs, None
        return inputs, references.outputs_for(param, sources)  # the saved case's own files: check them too
    case = references.saved_case(param, args.batch or None)
    if case is not None:
        return case
    shapes = []
    for op in graph.input_operators:
        shape = op.output_operand.shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise CliError(f"input '{op.name}' has no fixed shape in the .param: give --input")
        shapes.append((args.batch or shape[0],) + tuple(shape[1:]))
    _batch_fits(graph, args.batch or 1, [(shape[1:], 4) for shape in shapes])
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes], None


def _batch_fits(graph, batch: int, items: list) -> None:
    """A CliError, before anything is allocated, if `batch` copies of inputs of these (item shape, itemsize) pass
    the graph's memory limit on their own."""
    needed = sum(batch * math.prod(shape) * itemsize for shape, itemsize in items)
    if needed > graph.memory_limit:
        raise CliError(f"--batch {batch}: the inputs alone take {format_bytes(needed)}, over the memory limit of "
                       f"{format_bytes(graph.memory_limit)} (--memory-limit)")


def _save(path: str, outputs: list) -> None:
    """--save: the outputs as one .npz, written to the path given (np.savez would add .npz to another name)."""
    try:
        with open(path, "wb") as f:
            np.savez(f, **{f"output{k}": out for k, out in enumerate(outputs)})
    except OSError as e:
        raise CliError(f"--save {path}: {e.strerror or e}") from None


def _is_image_input(path: Path) -> bool:
    return path.suffix != ".npy"  # whatever is not an array is read as an image (Pillow knows many formats)


def _read_input(path: Path, op, args, own) -> np.ndarray:
    """A .npy file as it is; anything else as an image, prepared for graph input `op`."""
    if _is_image_input(path):
        return images.load_image(path, _preparation(op, args, own))
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError) as e:  # not an array
        raise CliError(f"--input {path}: cannot read it ({e})") from None


PREPARATION = ("resize", "crop", "mean", "std")


def _preparation(op, args, own=None) -> images.Preprocess:
    """ImageNet's preparation, scaled to the input's side where the .param fixes a square one other than 224
    (inception_v3's 299), then what the model's preprocess.json (`own`) says, then what --resize, --crop,
    --mean and --std change."""
    base = images.Preprocess.for_shape(op.output_operand.shape)
    if own is not None:
        base = own.applied_to(base)
    given = {name: _preparation_value(name, getattr(args, name)) for name in PREPARATION
             if getattr(args, name) is not None}
    for name in ("mean", "std"):
        values = given.get(name)
        if values is not None and len(values) != base.channels:
            if len(values) != 1:  # three numbers for a grayscale input
                raise CliError(f"--{name} {getattr(args, name)!r}: the model takes grayscale images (one "
                               f"channel): give one number")
            given[name] = values * base.channels
    resize, crop = given.get("resize", base.resize), given.get("crop", base.crop)
    if crop > resize:  # each valid alone, they do not fit together
        said = lambda name, value: f"--{name} {value}" + ("" if name in given else " (the default)")
        raise CliError(f"{said('crop', crop)} is larger than {said('resize', resize)}: the crop must fit in the "
                       f"resized image")
    return dataclasses.replace(base, **given)


def _preparation_value(name: str, text: str):
    """--resize/--crop: pixels, at least 1; --mean/--std: R,G,B or one number (for all three channels, or the
    one of a grayscale input), std above 0."""
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
    return values


def _no_preparation_without_images(args) -> None:
    given = [f"--{name}" for name in PREPARATION if getattr(args, name) is not None]
    if given:
        raise CliError(f"{' '.join(given)} prepare images: give --input IMAGE or a folder of them")


def _run_images(console, graph, param: Path, sources: list, names, random_weights: bool, args, own) -> None:
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
    labelled = accuracy.labelled_images(source, names) if source.is_dir() and accuracy.is_labelled(source) else None
    if args.plot and labelled is None:
        raise CliError(f"--plot draws a labelled folder's confusion matrix: {source} has images, not class subfolders")
    paths = labelled.paths if labelled else images.find_images(source) if source.is_dir() else [source]
    pre = _preparation(graph.input_operators[0], args, own)
    batch = args.batch or FOLDER_BATCH
    with _progress(len(paths), show=not args.json) as advance:
        run = folder.classify(graph, paths, pre, batch, args.topk, names, on_progress=advance)
    report = None
    if labelled is not None:
        truth = dict(zip(labelled.paths, labelled.truths))
        report = accuracy.confusion([truth[row.path] for row in run.rows], [row.indices[0] for row in run.rows],
                                    labelled.classes)
        if args.plot:
            accuracy.plot(report, Path(args.plot))
    if args.out:
        folder.write_rows(Path(args.out), run.rows)
    if args.json:
        print(json.dumps({
            "model": str(param), "backend": graph.backend, "images": len(paths), "batch": batch,
            "skipped": [str(p) for p in run.skipped], "random_weights": random_weights, "out": args.out,
            **({} if args.out else {"rows": [folder.row_dict(row) for row in run.rows]}),
            **({} if report is None else {"accuracy": accuracy.as_dict(report), "plot": args.plot}),
        }))
        return
    if not args.out:
        for row in run.rows:
            console.print(f"{row.path}: " + _classes(row.indices, row.values, row.labels), highlight=False)
    skipped = f", {len(run.skipped)} skipped (unreadable)" if run.skipped else ""
    console.print(f"{len(run.rows)} image(s) of {source} through {param.name} in batches of {batch}{skipped}"
                  + (f"; rows written to {args.out}" if args.out else ""), highlight=False)
    if report is not None:
        console.print(accuracy.table(report), highlight=False, markup=False)
        if args.plot:
            console.print(f"confusion matrix drawn in {args.plot}", highlight=False)
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

    from kuiper.app.inspection import profile_by_type

    on_device = graph.runtime is not None
    total = sum((d if on_device else h) for _, h, d in graph.last_profile) or 1e-12
    columns = ["host ms"] + (["device ms"] if on_device else []) + ["%"]

    def cells(host, device):
        share = (device if on_device else host) / total
        return [f"{host * 1e3:.3f}"] + ([f"{device * 1e3:.3f}"] if on_device else []) + [f"{100 * share:.1f}"]

    table = Table(title="time per operator (last forward)")
    names = ["operator", "type", "variant"]  # the variant chosen for the shape (kuiper/core/variants.py)
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
