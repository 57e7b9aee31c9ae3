"""Fuzzing: corrupted copies of the committed small models, and bad forward inputs.

Every case must end in a kuiper error (a KuiperError subclass) or in a correct run (one array per graph output).
Anything else (a raw numpy or Python exception, a MemoryError, a hang) is a failure. The cases are drawn from a
fixed seed, so a failure reproduces: `python tests/test_fuzz.py` prints every case's outcome.

Each case runs in this process. Allocation is bounded by `memory_limit` (a corrupt shape must be refused by the
planner before anything is allocated) and time by an interval timer: a case past CASE_SECONDS fails.
"""

from __future__ import annotations

import functools
import random
import re
import signal
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest, when run as a script
from conftest import load_manifest, model_cases, model_paths  # noqa: E402

import kuiper  # noqa: E402
from kuiper import KuiperError  # noqa: E402

SEED = 20240611
MODEL_CASES = 500        # corrupted models
INPUT_CASES = 100        # bad forward inputs on intact models
MEMORY_LIMIT = 64 << 20  # far above what the small models need at their batch of 2, far below a runaway shape
CASE_SECONDS = 10
#: the small committed models (resnet18 weighs 45 MB and custom_scale needs its custom operator config)
MODELS = ("act_zoo", "conv_zoo", "expr_two_inputs", "pool_zoo", "reshape_batch", "resize_zoo", "shape_zoo",
          "unet_tiny")

# what a corrupted value becomes: hostile sizes, non-finite numbers, wrong types
HOSTILE_NUMBERS = ("0", "-1", "1", "2", "7", "100000", "2147483648", "99999999999999999999", "1.5", "-0.5")
HOSTILE_VALUES = ("nan", "inf", "-inf", "-1", "0", "100000", "(100000,100000)", "(20000,20000)", "(0,0)", "(-1,-1)",
                  "(1,2,3)", "True", "maybe", "None", "()", "1e30", "(nan,nan)", "(inf,inf)", "(1.5,-2)", "%x")


class CaseTimeout(Exception):
    """A case ran past CASE_SECONDS (not a KuiperError, so it counts as a failure)."""


# ---- the committed models, read once --------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def pristine(name: str) -> tuple:
    """(param text, bin bytes, the saved inputs of the model's first case)."""
    param, bin_path = model_paths(name)
    _, inputs, _ = model_cases(name)[0]
    return param.read_text(), bin_path.read_bytes(), inputs


# ---- mutations of the .param text -------------------------------------------------------------------------
def _operator_lines(lines: list) -> range:
    return range(2, len(lines))


def _recount(lines: list) -> list:
    """Line 2 rewritten to the operator and operand counts the operator lines declare, so that a mutation
    reaches the checks past the reader's counts (lines it cannot count stay as they are)."""
    outputs = set()
    for line in lines[2:]:
        tokens = line.split()
        if len(tokens) < 4 or not (tokens[2].isdigit() and tokens[3].isdigit()):
            return lines
        first = 4 + int(tokens[2])
        outputs.update(tokens[first:first + int(tokens[3])])
    return lines[:1] + [f"{len(lines) - 2} {len(outputs)}"] + lines[2:]


def mutate_number(rng, lines):
    i = rng.choice(_operator_lines(lines))
    matches = list(re.finditer(r"-?\d+(?:\.\d+)?", lines[i]))
    m = rng.choice(matches)
    lines[i] = lines[i][:m.start()] + rng.choice(HOSTILE_NUMBERS) + lines[i][m.end():]
    return lines


def mutate_shape(rng, lines):
    specs = [(i, m) for i in _operator_lines(lines) for m in re.finditer(r"#[^=\s]+=\(([^)]*)\)", lines[i])]
    i, m = rng.choice(specs)
    dims = m.group(1).split(",") if m.group(1) else []
    how = rng.choice(("dim", "drop", "add"))
    if how == "dim" and dims:
        dims[rng.randrange(len(dims))] = rng.choice(("0", "1", "100000", "99999999999999999999", "?", "%n", "3"))
    elif how == "drop" and dims:
        dims.pop(rng.randrange(len(dims)))
    else:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(("1", "2", "100000")))
    lines[i] = lines[i][:m.start(1)] + ",".join(dims) + lines[i][m.end(1):]
    return lines


def mutate_param(rng, lines):
    params = [(i, m) for i in _operator_lines(lines)
              for m in re.finditer(r"(?<=\s)([A-Za-z_][\w]*)=(\S+)", lines[i])]
    if not params:
        return mutate_number(rng, lines)
    i, m = rng.choice(params)
    lines[i] = lines[i][:m.start(2)] + rng.choice(HOSTILE_VALUES) + lines[i][m.end(2):]
    return lines


def mutate_unknown_param(rng, lines):
    i = rng.choice(range(3, len(lines)))  # past the input: an operator with a layer
    lines[i] += rng.choice((" frobnicate=7", " inplace=maybe", " momentum=0.1"))
    return lines


def mutate_delete(rng, lines):
    del lines[rng.choice(_operator_lines(lines))]
    return _recount(lines) if rng.random() < 0.7 else lines


def mutate_duplicate(rng, lines):
    i = rng.choice(_operator_lines(lines))
    copy = lines[i]
    if rng.random() < 0.7:  # renamed: a second operator whose outputs nobody reads
        tokens = copy.split()
        if len(tokens) >= 4 and tokens[2].isdigit() and tokens[3].isdigit():
            first, count = 4 + int(tokens[2]), int(tokens[3])
            tokens[1] += "_dup"
            tokens[first:first + count] = [t + "_dup" for t in tokens[first:first + count]]
            copy = " ".join(tokens)
    lines.insert(i + 1, copy)
    return _recount(lines)


def mutate_cycle(rng, lines):
    """An operator reads the output of an operator after it: a cycle, or an input used before it exists."""
    i = rng.choice(range(3, len(lines) - 1))
    j = rng.choice(range(i, len(lines)))
    late, early = lines[j].split(), lines[i].split()
    if len(late) < 5 or len(early) < 5 or not (late[2].isdigit() and early[2].isdigit()) or int(early[2]) == 0:
        return mutate_delete(rng, lines)
    late_output = late[4 + int(late[2])] if int(late[3]) else late[4]
    early[4 + rng.randrange(int(early[2]))] = late_output
    lines[i] = " ".join(early)
    return lines


def mutate_structure(rng, lines):
    """Graph shapes the reader accepts but the graph must judge: no output, a nested tuple, an output that
    feeds an operator."""
    out = next((i for i in _operator_lines(lines) if lines[i].startswith("pnnx.Output")), None)
    if out is None:
        return lines
    how = rng.choice(("no output", "nested tuple", "output feeds"))
    tokens = lines[out].split()
    if how == "no output":
        del lines[out]
    elif how == "nested tuple":
        lines[out:out + 1] = [f"prim::TupleConstruct fuzz_tuple 1 1 {tokens[4]} fuzz_nested",
                              f"pnnx.Output {tokens[1]} 1 0 fuzz_nested"]
    else:
        lines[out:out + 1] = [f"pnnx.Output {tokens[1]} 1 1 {tokens[4]} fuzz_out",
                              "nn.ReLU fuzz_relu 1 1 fuzz_out fuzz_after"]
    return _recount(lines)


def mutate_deep_expression(rng, lines):
    depth = rng.choice((50, 500, 1000, 5000, 20000))
    nested = "neg(" * depth + "@0" + ")" * depth
    for i in _operator_lines(lines):
        if " expr=" in lines[i]:
            lines[i] = re.sub(r"expr=\S+", f"expr={nested}", lines[i])
            return lines
    # no expression in this model: one after the input, reading it
    first = lines[2].split()
    lines.insert(3, f"pnnx.Expression fuzz_expr 1 1 {first[4]} fuzz_deep expr={nested}")
    return _recount(lines)


PARAM_MUTATIONS = (mutate_number, mutate_shape, mutate_param, mutate_param, mutate_unknown_param, mutate_delete,
                   mutate_duplicate, mutate_cycle, mutate_structure, mutate_deep_expression)


def mutate_text_bytes(rng, data: bytes) -> bytes:
    how = rng.choice(("flip", "truncate"))
    if how == "truncate":
        return data[:rng.randrange(len(data))]
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def mutate_bin(rng, data: bytes) -> bytes:
    how = rng.choice(("flip", "truncate", "headers", "directory"))
    if how == "truncate":
        return data[:rng.randrange(len(data))]
    data = bytearray(data)
    # "headers": the first local header (member name, sizes); "directory": the central directory at the end
    region = {"flip": range(len(data)), "headers": range(min(64, len(data))),
              "directory": range(max(0, len(data) - 256), len(data))}[how]
    for _ in range(rng.randint(1, 6)):
        data[rng.choice(region)] ^= 1 << rng.randrange(8)
    return bytes(data)


def model_case(rng) -> dict:
    name = rng.choice(MODELS)
    text, weights, inputs = pristine(name)
    kind = rng.choices(("param", "param bytes", "bin"), weights=(8, 1, 1))[0]
    param = text.encode()
    if kind == "param":
        mutation = rng.choice(PARAM_MUTATIONS)
        kind = mutation.__name__
        param = "\n".join(mutation(rng, text.rstrip("\n").split("\n"))).encode() + b"\n"
    elif kind == "param bytes":
        param = mutate_text_bytes(rng, param)
    else:
        weights = mutate_bin(rng, weights)
    return {"label": f"{name}: {kind}", "param": param, "bin": weights, "inputs": inputs,
            "backend": rng.choice(("numpy", "reference"))}


# ---- bad forward inputs on intact models --------------------------------------------------------------------
def bad_inputs(rng, inputs: list) -> tuple:
    """(what, the arrays to pass) for one kind of bad input."""
    x = inputs[0]
    rest = list(inputs[1:])
    how = rng.choice(("batch 0", "zero dim", "huge", "rank", "float64", "int32", "strided", "list", "count",
                      "nan", "inf", "channels", "scalar", "larger batch"))
    if how == "batch 0":
        bad = np.zeros((0,) + x.shape[1:], np.float32)
    elif how == "zero dim":
        bad = np.zeros(x.shape[:-1] + (0,), np.float32)
    elif how == "huge":
        bad = np.zeros(x.shape[:-2] + (3000, 3000), np.float32)  # zeros: pages untouched until written
    elif how == "rank":
        bad = x[None]
    elif how == "float64":
        bad = x.astype(np.float64)
    elif how == "int32":
        bad = x.astype(np.int32)
    elif how == "strided":
        bad = x[..., ::2]
    elif how == "list":
        bad = x.tolist()
    elif how == "count":
        return how, inputs + [x]
    elif how == "nan":
        bad = np.full_like(x, np.nan)
    elif how == "inf":
        bad = np.full_like(x, np.inf)
    elif how == "channels":
        bad = np.zeros((x.shape[0], x.shape[1] + 1) + x.shape[2:], np.float32) if x.ndim > 1 else x[:0]
    elif how == "scalar":
        bad = np.float32(1.0)
    else:
        bad = np.concatenate([x] * 3)
    return how, [bad] + rest


def input_case(rng) -> dict:
    name = rng.choice(MODELS)
    text, weights, inputs = pristine(name)
    how, arrays = bad_inputs(rng, inputs)
    return {"label": f"{name}: input {how}", "param": text.encode(), "bin": weights, "inputs": arrays,
            "backend": rng.choice(("numpy", "reference"))}


def cases(seed: int = SEED) -> list:
    rng = random.Random(seed)
    return [model_case(rng) for _ in range(MODEL_CASES)] + [input_case(rng) for _ in range(INPUT_CASES)]


# ---- running a case -------------------------------------------------------------------------------------------
def _alarm(signum, frame):
    raise CaseTimeout(f"over {CASE_SECONDS} s")


def run_case(case: dict, directory: Path, load) -> tuple:
    """("ran" | "kuiper error" | "failed", detail). `load(param, backend=)` builds the graph."""
    param = directory / "m.pnnx.param"
    param.write_bytes(case["param"])
    (directory / "m.pnnx.bin").write_bytes(case["bin"])
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # KuiperWarnings, and numpy's on inf/nan data
            graph = load(param, backend=case["backend"])
            outputs = graph.forward(*case["inputs"])
        # a run returns one array per graph output, and there is at least one (a graph without must be refused)
        if not outputs or len(outputs) != len(graph.output_operands) or not all(isinstance(o, np.ndarray)
                                                                                 for o in outputs):
            return "failed", f"forward returned {outputs!r:.200}"
        return "ran", ""
    except KuiperError as e:
        return "kuiper error", f"{type(e).__name__}: {e}"
    except BaseException as e:  # noqa: BLE001 (everything else is what the fuzzer looks for)
        if isinstance(e, KeyboardInterrupt):
            raise
        return "failed", f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_all(directory: Path, load, verbose: bool = False) -> tuple:
    """(Counter of outcomes, [(label, detail) of each failure])."""
    counts, failures = Counter(), []
    for case in cases():
        outcome, detail = run_case(case, directory, load)
        counts[outcome] += 1
        if outcome == "failed":
            failures.append((case["label"], detail))
        if verbose:
            print(f"{outcome:<13} {case['label']:<40} {detail[:160]}")
    return counts, failures


def test_fuzzed_models_and_inputs_end_in_kuiper_errors_or_correct_runs(tmp_path):
    assert set(MODELS) <= set(load_manifest()["models"])
    counts, failures = run_all(tmp_path, functools.partial(kuiper.load, memory_limit=MEMORY_LIMIT))
    assert not failures, f"{len(failures)} of {sum(counts.values())} cases failed:\n" + "\n".join(
        f"  {label}: {detail}" for label, detail in failures)
    # the fuzzer reaches both ends: corrupt files refused, and intact or harmlessly changed ones run
    assert counts["ran"] > 20 and counts["kuiper error"] > 100, counts


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        counts, failures = run_all(Path(tmp), functools.partial(kuiper.load, memory_limit=MEMORY_LIMIT),
                                   verbose=True)
    print(dict(counts))
    sys.exit(1 if failures else 0)
