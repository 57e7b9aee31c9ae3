"""What the commands share: the error type, option types, the console, the default model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kuiper.core.errors import KuiperError
from kuiper.core.shipped import shipped
from kuiper.runtime import auto

DEFAULT_MODEL = Path("resnet18", "resnet18.pnnx.param")  # within models/
BACKEND_HELP = ("auto (default: an OpenCL GPU, else Intel's CPU OpenCL runtime, else numpy; KUIPER_BACKEND sets "
                "another), numpy (fast CPU layers), reference (the textbook layers only) or opencl")


class CliError(KuiperError):
    """A command-line usage problem (missing file, bad option value)."""


def positive(text: str) -> int:
    """An argparse type: an int of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def json_object(text: str) -> dict:
    """An argparse type: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"give a JSON object, got {type(value).__name__}")
    return value


#: --template-kwargs' help
TEMPLATE_KWARGS_HELP = ("a JSON object of more names the chat template reads, e.g. '{\"enable_thinking\": false}' for "
                        "Qwen3")


def shape(text: str) -> tuple:
    """An argparse type: N,C,H,W as ints of at least 1."""
    try:
        return tuple(positive(d) for d in text.split(","))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (give sizes of at least 1, as in 1,3,224,224)") from None


def rich_console():
    """rich's console for our output. When the output is not a terminal, rich would assume 80 columns, break
    long lines in the middle of a shape and cut table cells short (1x64x112x1...): soft wrap keeps lines whole,
    and a console as wide as any table gives every cell its whole width."""
    from rich.console import Console

    console = Console(soft_wrap=True)
    if not console.is_terminal:
        console.width = 10_000
    return console


def default_model() -> Path:
    """The embedded ResNet-18, from the checkout's models/ or the copy an install carries (kuiper/core/shipped.py)."""
    return shipped("models") / DEFAULT_MODEL


def say_backend(graph) -> None:
    """Where the backend was the default, the line that says what it became (runtime/auto.py), on stderr."""
    if graph.choice is not None:
        print(auto.said(graph), file=sys.stderr)


def require(path: Path, what: str) -> None:
    if not path.exists():
        raise CliError(f"{what} file not found: {path}")
