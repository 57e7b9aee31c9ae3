"""The model zoo on kuiper: each architecture exported with pnnx, checked against PyTorch on numpy and OpenCL,
and timed beside torch eager and onnxruntime.

    python benchmarks/zoo.py [--models resnet50,timm,transformers:vit] [--engines numpy,opencl,torch,onnxruntime]
                             [--threads 2] [--rounds 3] [--runs 5] [--warmup 2] [--device SPEC]
                             [--cache DIR] [--check] [--json FILE] [--retry] [--export-timeout S]

The models are torchvision's (the default), timm's, transformers' vision models and ultralytics' YOLO
(benchmarks/zoo_models.py lists them, their families and input sizes). Needs the `export` extra (torch,
torchvision, pnnx), timm, transformers or ultralytics for their models and, for that engine, onnxruntime and
onnx. Models have random weights (nothing is downloaded), made to show errors: BatchNorm statistics, LayerNorm
affine values and layer scales get random values (kuiper.app.export.randomize). Each is exported once, in a
process of its own (pnnx may crash), into --cache (default ~/.cache/kuiper/zoo) at batch 1, with a seeded input,
PyTorch's output in float32 and in float64, its weights for torch and an ONNX copy. An export that failed is
remembered there (failed.json) and tried again only with --retry.

Every engine on every model then runs in a fresh process of its own, all of them in turn, --rounds times
(benchmarks/processes.py). Each process first checks the engine's output against PyTorch's (max |diff| /
max |ref|, at most 1e-4 to pass) and then times --runs forwards after --warmup. The table gives each engine's
median over the rounds, and kuiper numpy's time over torch's and onnxruntime's as the median of the per-round
ratios. --check runs one round of one forward: correctness only, and the failures grouped by cause. A model
whose float32 PyTorch output is itself far from its float64 one (random weights can make a deep model
ill-conditioned) is judged against the float64 output instead: see `conditioning`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import zoo_models

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-4  # max |kuiper - torch| / max |torch|
#: PyTorch's output in float64 (the model and input converted), beside its float32 one
FLOAT64 = "out0_float64.npy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names or sources: torchvision, timm, transformers, "
                                         "ultralytics (default: torchvision's; see benchmarks/zoo_models.py)")
    parser.add_argument("--engines", default="numpy,opencl,torch,onnxruntime",
                        help="comma-separated: numpy, opencl (kuiper's default device, or --device), torch, onnxruntime")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", help="kuiper's OpenCL device (P:D or a name substring)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kuiper" / "zoo")
    parser.add_argument("--check", action="store_true", help="one round of one forward: correctness only")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--retry", action="store_true", help="export again the models whose export failed before")
    parser.add_argument("--export-timeout", type=float, default=900, help="seconds one model's export may take")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # ENGINE: time it on --models in this process
    args = parser.parse_args()
    if args.worker == "export":
        return args.json.write_text(json.dumps(export(args.models, args.cache, "onnxruntime" in args.engines)))
    if args.worker:
        return worker(args)
    if args.check:
        args.rounds, args.runs, args.warmup = 1, 1, 0
    models = zoo_models.names(args.models)
    engines = args.engines.split(",")
    failed = {}  # {(model, engine or None for all): why}
    from processes import python, run_rounds

    for name in models:
        failed.update({(name, None if engine == "all" else engine): why
                       for engine, why in export_in_process(name, args).items()})

    options = ["--cache", args.cache, "--threads", args.threads, "--runs", args.runs, "--warmup", args.warmup]
    options += ["--device", args.device] if args.device else []
    jobs = {(name, engine): python(__file__, "--worker", engine, "--models", name, *options)
            for name in models for engine in engines
            if (name, None) not in failed and (name, engine) not in failed}
    results = run_rounds(jobs, args.rounds, lambda r, key: print(f"round {r + 1}/{args.rounds}: {key[0]} on "
                                                                    f"{key[1]}", file=sys.stderr, flush=True))
    report(models, engines, failed, results, args)


# ---- exporting (a process of its own per model: pnnx may crash or hang) ------------------------------------
def export_in_process(name: str, args) -> dict:
    """What failed exporting `name` ({"all" or engine: why}), exporting it in a fresh process unless it is in
    the cache already, or its export failed before (kept in failed.json; --retry tries again)."""
    from processes import python

    stem = zoo_models.folder(name)
    folder = args.cache / stem
    onnx = "onnxruntime" in args.engines
    exported = (folder / f"{stem}.export.json").exists() and (folder / "torch_state.pt").exists()
    if exported and ((folder / f"{stem}.onnx").exists() or not onnx) and (folder / FLOAT64).exists():
        return {}
    if (folder / "failed.json").exists() and not args.retry:
        return json.loads((folder / "failed.json").read_text())
    print(f"exporting {name}", file=sys.stderr, flush=True)
    result = folder / "export-result.json"
    folder.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    command = python(__file__, "--worker", "export", "--models", name, "--cache", args.cache,
                     "--engines", args.engines, "--json", result)
    try:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=args.export_timeout)
        failed = (json.loads(result.read_text()) if result.exists() else
                  {"all": "the export crashed: " + ((done.stderr.strip().splitlines() or
                                                     [f"exit status {done.returncode}"])[-1])})
    except subprocess.TimeoutExpired:
        failed = {"all": f"the export took more than {args.export_timeout:g} s"}
    result.unlink(missing_ok=True)
    if failed:
        (folder / "failed.json").write_text(json.dumps(failed, indent=1))
    return failed


def export(name: str, cache: Path, onnx: bool) -> dict:
    """Export `name` into cache/NAME once (and to ONNX once, when asked). Returns what failed:
    {"all": why} when pnnx did (no engine can run it), {"onnxruntime": why} when ONNX did."""
    stem = zoo_models.folder(name)
    folder = cache / stem
    exported = (folder / f"{stem}.export.json").exists() and (folder / "torch_state.pt").exists()
    onnx_file = folder / f"{stem}.onnx"
    if exported and (onnx_file.exists() or not onnx) and (folder / FLOAT64).exists():
        return {}
    import numpy as np
    import torch

    from kuiper.app import export as kx
    from kuiper.core.errors import KuiperError

    def said(e):
        return (str(e).splitlines() or [type(e).__name__])[0]

    print(f"exporting {name}", file=sys.stderr, flush=True)
    try:
        module = model(name)
    except Exception as e:  # noqa: BLE001 (the model's own library raises what it raises)
        return {"all": f"building the model failed: {type(e).__name__}: {said(e)}"}
    shape = zoo_models.input_shape(name)
    if not exported:
        try:
            kx.export(module, [shape], folder, stem, spec=name, random_weights=True)
        except (KuiperError, RuntimeError) as e:
            return {"all": said(e)}
        torch.save(module.state_dict(), folder / "torch_state.pt")
    if onnx and not onnx_file.exists():
        from onnx_engine import export_onnx

        try:
            export_onnx(module, torch.zeros(shape), onnx_file)
        except Exception as e:  # noqa: BLE001 (torch.onnx raises many kinds)
            return {"onnxruntime": said(e)}
    if not (folder / FLOAT64).exists():
        record = json.loads((folder / f"{stem}.export.json").read_text())
        x = torch.from_numpy(np.load(folder / record["inputs"][0]["file"]))
        try:
            with torch.no_grad():
                exact = first_tensor(module.double()(x.double())).numpy()
        except Exception:  # noqa: BLE001 (an operator without a float64 kernel): no float64 figures, NaN
            exact = np.full(record["outputs"][0]["shape"], np.nan)
        np.save(folder / FLOAT64, exact)
    return {}


def first_tensor(value):
    while isinstance(value, (tuple, list)):
        value = value[0]
    return value


def model(name: str):
    """The torch module, with the random values that show errors (the same every time)."""
    import torch

    from kuiper.app import export as kx

    torch.manual_seed(0)
    module = zoo_models.build(name)
    kx.randomize(module, seed=0)
    return module.eval()


# ---- one engine on one model (a process of its own) -----------------------------------------------------
def worker(args) -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # before numpy or torch loads its BLAS
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from kuiper.cpu.blas import restart_if_misread

    restart_if_misread()
    name = args.models
    stem = zoo_models.folder(name)
    folder = args.cache / stem
    record = json.loads((folder / f"{stem}.export.json").read_text())
    x = np.load(folder / record["inputs"][0]["file"])
    reference = np.load(folder / record["outputs"][0]["file"])
    label, forward = engine(args, name, folder, stem)
    out = forward(x)

    def error_of(a, b):
        return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))

    error = error_of(out, reference)
    # how far float32 alone takes PyTorch from its float64 output: where that is large, so is any engine's error
    errors64 = {}
    if (folder / FLOAT64).exists():
        exact = np.load(folder / FLOAT64)
        errors64 = {"relative_error_float64": error_of(out, exact), "torch_error_float64": error_of(reference, exact)}
    for _ in range(args.warmup):
        forward(x)
    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        forward(x)
        times.append(time.perf_counter() - started)
    args.json.write_text(json.dumps({"engine": label, "relative_error": error, **errors64,
                                     "median_ms": statistics.median(times) * 1e3}))


def engine(args, name: str, folder: Path, stem: str):
    """(label, forward(x) -> the first output as a numpy array) of --worker on this model."""
    if args.worker in ("numpy", "opencl"):
        import kuiper

        kuiper.set_num_threads(args.threads)
        options = {"device": args.device} if args.worker == "opencl" and args.device else {}
        graph = kuiper.load(folder / f"{stem}.pnnx.param", backend=args.worker, **options)
        label = f"kuiper-{args.worker}"
        if graph.runtime is not None:
            label += f" ({graph.runtime.device.name.strip()})"
        return label, lambda x: graph.forward(x)[0]
    if args.worker == "onnxruntime":
        from onnx_engine import onnxruntime_forward

        return onnxruntime_forward(folder / f"{stem}.onnx", args.threads)
    if args.worker == "torch":
        import torch

        torch.set_num_threads(args.threads)
        module = model(name)
        module.load_state_dict(torch.load(folder / "torch_state.pt"))

        def forward(x):
            with torch.no_grad():
                out = module(torch.from_numpy(x))
            return out.numpy()

        return f"torch-{torch.__version__}-eager", forward
    raise SystemExit(f"unknown engine {args.worker!r}")


# ---- the table --------------------------------------------------------------------------------------------
def report(models, engines, failed, results, args) -> None:
    from processes import machine

    def median_of(rounds, key):
        values = [r[key] for r in rounds if key in r]
        return statistics.median(values) if values else None

    def ratio(name, engine, base):
        pairs = [(a["median_ms"], b["median_ms"]) for a, b in zip(results.get((name, engine), []),
                                                                   results.get((name, base), []))
                 if "median_ms" in a and "median_ms" in b]
        return statistics.median(a / b for a, b in pairs) if pairs else None

    rows = []
    for name in models:
        row = {"model": name, "family": zoo_models.family(name)}
        for (model_name, engine), why in failed.items():
            if model_name == name:
                row[f"{engine or 'pnnx'}_export_error"] = why
        for engine in engines:
            rounds = results.get((name, engine), [])
            errors = [r["error"] for r in rounds if "error" in r]
            row[engine] = {key: median_of(rounds, key) for key in ("relative_error", "relative_error_float64",
                                                                    "torch_error_float64")}
            row[engine].update(ms=median_of(rounds, "median_ms"), error=errors[0] if errors else None)
        for base in ("torch", "onnxruntime"):
            if "numpy" in engines and base in engines:
                row[f"numpy/{base}"] = ratio(name, "numpy", base)
        rows.append(row)

    def cell(value, spec):
        return "-" if value is None else format(value, spec)

    timed = not args.check  # --check's single cold forward is no timing
    header = ["model", "family"] + [f"{e} err" for e in engines] + ["torch fp32 err"]
    header += [f"{e} ms" for e in engines if timed]
    header += [f"numpy/{b}" for b in ("torch", "onnxruntime") if timed and "numpy" in engines and b in engines]
    print(f"\n{args.threads} thread(s), {args.rounds} round(s), median of {args.runs} run(s); err = max|diff|/max|ref| "
          f"against PyTorch (passes at <= {TOLERANCE:g}); torch fp32 err: PyTorch's own float32 output against its "
          f"float64 one; ~fp32: {ILL_CONDITIONED}; {machine()}")
    print("| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    notes = []
    for row in rows:
        cells = [row["model"], row["family"]]
        for e in engines:  # torch against its own saved output: 0 unless torch is not deterministic
            err = row[e]["relative_error"]
            verdict = "" if err is None or err <= TOLERANCE else " ~fp32" if conditioning(row[e]) else " FAIL"
            cells.append("-" if err is None else f"{err:.1e}{verdict}")
        own = [row[e]["torch_error_float64"] for e in engines if row[e]["torch_error_float64"] is not None]
        cells.append(f"{own[0]:.1e}" if own else "-")
        cells += [cell(row[e]["ms"], ".1f") for e in engines if timed]
        cells += [cell(row.get(f"numpy/{b}"), ".2f") for b in ("torch", "onnxruntime") if timed and f"numpy/{b}" in row]
        print("| " + " | ".join(cells) + " |")
        notes += [f"{row['model']}: {key.split('_')[0]} export failed: {why}" for key, why in row.items()
                  if key.endswith("_export_error")]
        notes += [f"{row['model']} on {e}: {row[e]['error']}" for e in engines if row[e]["error"]]
    for note in notes:
        print(f"- {note}")
    by_cause = failures_by_cause(rows, engines)
    print(f"\n{sum(not any(row['failures'].values()) for row in rows)} of {len(rows)} match PyTorch on "
          f"{' and '.join(engines)}." + (" Failures by cause:" if by_cause else ""))
    for why, names in by_cause.items():
        print(f"- {why} ({len(names)}): {', '.join(names)}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "rounds": args.rounds, "runs": args.runs,
                                         "machine": machine(), "rows": rows}, indent=2))


def failures_by_cause(rows, engines) -> dict:
    """{cause: [model or model (engine)]}, also kept in each row under "failures" ({engine: cause})."""
    by_cause = {}
    for row in rows:
        row["failures"] = {}
        for engine in engines:
            why = cause(row, engine)
            if why:
                row["failures"][engine] = why
                by_cause.setdefault(why, []).append(row["model"])
    for why, names in by_cause.items():  # a model failing alike on every engine is named once
        by_cause[why] = list(dict.fromkeys(names))
    return dict(sorted(by_cause.items(), key=lambda item: -len(item[1])))


ILL_CONDITIONED = ("ill-conditioned at random weights: PyTorch's own float32 error is over a tenth of the "
                   "tolerance, and kuiper's output is as close to PyTorch's float64 one as its float32 one")


def conditioning(result: dict) -> bool:
    """Whether an output off PyTorch's by more than the tolerance is explained by the model's conditioning:
    PyTorch's float32 output is itself off its float64 one by over a tenth of the tolerance, and the engine's
    is no further from the float64 one than twice that (plus the tolerance)."""
    own, error = result.get("torch_error_float64"), result.get("relative_error_float64")
    return own is not None and error is not None and own > TOLERANCE / 10 and error <= 2 * own + TOLERANCE


def cause(row, engine) -> str | None:
    """Why `engine` did not match PyTorch on the model of `row`, as a cause shared by models failing alike."""
    known = zoo_models.PNNX_WRONG.get(row["model"])
    export_error = row.get("pnnx_export_error") or row.get(f"{engine}_export_error")
    if export_error:
        return f"export: {export_error.split(' (its log')[0][:160]}"
    error, relative = row[engine]["error"], row[engine]["relative_error"]
    if error is None and relative is not None and relative <= TOLERANCE:
        return None
    if error is None and conditioning(row[engine]):
        return ILL_CONDITIONED
    if known:
        return f"pnnx writes a wrong graph: {known}"
    if error is None:
        return "kuiper's output differs from PyTorch's"
    said = error.split(": ", 1)[-1] if "Error: " in error else error
    if "no layer for" in said:  # "...: no layer for 'TYPE' (operator NAMES); 'TYPE' (...); register one, ..."
        return "kuiper lacks " + ", ".join(re.findall(r"'([^']+)' \(operator", said))
    return f"kuiper refuses: {said[:200]}"


if __name__ == "__main__":
    main()
