"""`kuiper export`: a PyTorch model to PNNX with a sample input and PyTorch's outputs, then kuiper checked
against them (the export extra: torch, torchvision, pnnx)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from kuiper.app.cli.common import CliError, rich_console, shape
from kuiper.runtime.backends import BACKENDS


def add_parser(sub, common, custom) -> None:
    """The export command and its options."""
    export = sub.add_parser("export", parents=[common],
                            help="export a PyTorch model to PNNX and check kuiper against PyTorch on it "
                                 '(needs pip install "kuiper[export]")')
    export.add_argument("spec", metavar="SPEC",
                        help="torchvision:NAME (a classification or segmentation model, random weights) or "
                             "FILE.py:FUNCTION (a function returning your torch.nn.Module)")
    export.add_argument("--input-shape", action="append", metavar="N,C,H,W", type=shape,
                        help="trace at this input shape, once per model input (default 1,3,224,224)")
    export.add_argument("--out", metavar="DIR", help="where the files go (default: ./NAME)")
    export.add_argument("--name", help="the files' name (default: the model's or the function's name)")
    export.add_argument("--randomize", action="store_true",
                        help="give normalization statistics and layer scales random values first, which show "
                             "a wrong layer that a fresh model's trivial ones would hide")
    export.add_argument("--backend", default="numpy", choices=BACKENDS, help="the backend that checks it")
    export.set_defaults(func=cmd_export)


def cmd_export(args) -> None:
    from kuiper.app import export as exporting

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

    console = rich_console()
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
        # takes that too (kuiper.app.export.output_to)
        with Live(spinner, console=Console(file=stream), transient=True, refresh_per_second=12):
            yield lambda phase: spinner.update(text=f"{phase} ...")
