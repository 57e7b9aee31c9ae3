"""The `kuiper` command line: run, detect, inspect, export, devices, lessons, generate, chat, serve.

Errors print one line and exit with status 1 (2 for a usage error, as argparse does); `--debug`, before or after
the command, shows the traceback instead. Warnings print one line each.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import kuiper
from kuiper.app.cli import detect, devices, export, generate, inspect, lessons, run, serve
from kuiper.app.cli.common import CliError, default_model  # noqa: F401  (what callers of the CLI use)
from kuiper.core.errors import KuiperError
from kuiper.cpu.blas import restart_if_misread

#: the commands, in the order `kuiper --help` lists them: each module adds its parser and its function
COMMANDS = (run, detect, inspect, export, devices, lessons, generate, serve)


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
    for command in COMMANDS:
        command.add_parser(sub, common, custom)
    return parser
