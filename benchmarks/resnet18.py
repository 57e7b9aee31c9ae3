"""ResNet-18 forward time: kuiper's backends next to torch eager, each validated before it is timed.

    python benchmarks/resnet18.py [--batch 1] [--runs 20] [--warmup 3] [--threads 2]
                                  [--engines numpy,torch] [--device SPEC] [--torch-device cpu|cuda]
                                  [--processes ROUNDS] [--json FILE]

Engines: `auto` (kuiper's default backend, kuiper/runtime/auto.py), `numpy`, `opencl` (in-order queue),
`opencl-levels` (levelized schedule on an out-of-order queue), `torch` (eager, on --torch-device; on CUDA with
TF32 off so that both sides compute in fp32), `torch-graphs`
(the same captured once as a CUDA graph and replayed) and `onnxruntime` (CPU; benchmarks/onnx_engine.py). Every
engine is timed end to end: the input comes from host memory and the logits go back to it.

Both sides run the same weights (tools/export_models.build_model rebuilds the exported torch model), and
every engine is first checked against the PyTorch output saved in models/ (llm.c's habit: never time a
wrong kernel). A batch with no saved reference takes its images, and their reference logits, in turn from
the saved batch of 8. Prints one line per engine: median and best of `--runs` forwards after `--warmup`
untimed ones; --json also writes them to a file. Engines named twice run twice, one block after another.

With --processes ROUNDS every engine runs in a fresh process of its own instead, in turn, ROUNDS times: the
line of each engine then gives the median of its rounds' medians and the median per-round ratio to the
last engine (engines sharing a process disturb each other; see in_processes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from processes import machine

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "models" / "resnet18"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="BLAS / torch threads")
    parser.add_argument("--engines", default="numpy,torch", help="comma-separated: auto, numpy, opencl, opencl-levels, "
                        "torch, torch-graphs, onnxruntime; "
                        "opencl@SPEC runs on the device SPEC names (opencl@Intel, opencl-levels@0:0); with "
                        "--processes, ENGINE=DIR runs ENGINE from the kuiper checkout in DIR")
    parser.add_argument("--device", help="kuiper's OpenCL device (P:D or a name substring)")
    parser.add_argument("--torch-device", default="cpu", help="cpu or cuda")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "tf32"),
                        help="fp16: kuiper OpenCL stores tensors as half (precision='fp16'), torch runs model.half(); "
                             "tf32: kuiper's precision='tf32', torch with TF32 allowed (its default for convolutions)")
    parser.add_argument("--processes", type=int, metavar="ROUNDS",
                        help="run every engine in a fresh process of its own, in turn, for this many rounds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.processes:
        return in_processes(args)

    # thread counts must be fixed before numpy (and its BLAS) is imported
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from kuiper.cpu.blas import restart_if_misread

    restart_if_misread()  # AVX-512 kernels where numpy's OpenBLAS does not know the CPU (kuiper/cpu/blas.py)

    x, reference = batch_case(np, args.batch)
    engines = [make_engine(name, args, x) for name in args.engines.split(",")]
    from kuiper.app.references import TOLERANCES

    rtol = TOLERANCES[args.precision]  # half storage is held to a hundredth of the largest logit
    tolerance = rtol * max(1.0, float(np.abs(reference).max()))

    print(f"ResNet-18, batch {args.batch}, {args.precision}, {args.threads} thread(s), median of {args.runs} after "
          f"{args.warmup} warm-up")
    results = []
    for name, forward in filter(None, engines):
        out = forward()
        if not np.allclose(out, reference, rtol=rtol, atol=tolerance):
            raise SystemExit(f"{name}: output does not match the saved reference; not timing it")
        for _ in range(args.warmup):
            forward()
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            forward()
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        results.append({"engine": name, "median_ms": median * 1e3, "best_ms": min(times) * 1e3,
                        "images_per_s": args.batch / median})
        print(f"  {name:<48} median {median * 1e3:8.2f} ms   best {min(times) * 1e3:8.2f} ms   "
              f"{args.batch / median:8.1f} images/s")
    if args.json:
        args.json.write_text(json.dumps({"batch": args.batch, "runs": args.runs, "threads": args.threads,
                                         "machine": machine(), "results": results}, indent=2))


def in_processes(args) -> None:
    """Each round runs every engine in a fresh process of its own, one after another, and keeps its median
    (benchmarks/processes.py says why)."""
    from processes import python, run_rounds

    sys.path.insert(0, str(ROOT))  # machine() reads the CPU's flags with kuiper

    engines = args.engines.split(",")
    options = ["--batch", args.batch, "--runs", args.runs, "--warmup", args.warmup,
               "--threads", args.threads, "--torch-device", args.torch_device, "--precision", args.precision]
    options += ["--device", args.device] if args.device else []
    jobs = {}
    for engine in engines:
        # ENGINE=DIR: that engine of another checkout of kuiper (say, before a change), by its own script
        name, _, checkout = engine.partition("=")
        script = Path(checkout) / "benchmarks" / "resnet18.py" if checkout else Path(__file__)
        jobs[engine] = python(script, "--engines", name, *options)
    medians, labels = {}, {}
    for engine, rounds in run_rounds(jobs, args.processes).items():
        failed = [r["error"] for r in rounds if "error" in r]
        if failed:
            raise SystemExit(f"{engine}: {failed[0]}")
        checkout = engine.partition("=")[2]
        labels[engine] = rounds[0]["results"][0]["engine"] + (f" [{checkout}]" if checkout else "")
        medians[engine] = [r["results"][0]["median_ms"] for r in rounds]
    base = medians[engines[-1]]
    print(f"ResNet-18, batch {args.batch}, {args.precision}, {args.threads} thread(s), {args.processes} rounds of a "
          f"fresh process per engine, median of {args.runs} runs each; {machine()}")
    results = []
    for engine in engines:
        ratio = statistics.median(m / b for m, b in zip(medians[engine], base))
        results.append({"engine": labels[engine], "round_medians_ms": medians[engine], "ratio_to_last": ratio})
        print(f"  {labels[engine]:<48} median {statistics.median(medians[engine]):8.2f} ms   "
              f"rounds {' '.join(f'{m:.1f}' for m in medians[engine])}   x{ratio:.3f} of the last (per round)")
    if args.json:
        args.json.write_text(json.dumps({"batch": args.batch, "runs": args.runs, "threads": args.threads,
                                         "rounds": args.processes, "machine": machine(),
                                         "results": results}, indent=2))


def batch_case(np, batch: int):
    """The input and its saved PyTorch logits: the saved batch of that size, else images of the batch of 8."""
    saved = MODEL_DIR / f"b{batch}_in0.npy"
    if saved.exists():
        return np.load(saved), np.load(MODEL_DIR / f"b{batch}_out0.npy")
    rows = np.arange(batch) % 8
    return np.load(MODEL_DIR / "b8_in0.npy")[rows], np.load(MODEL_DIR / "b8_out0.npy")[rows]


def make_engine(name: str, args, x):
    """(label, forward) for one engine, or None when torch is not installed."""
    if name in ("torch", "torch-graphs"):
        return torch_engine(args, x, graphs=name == "torch-graphs")
    if name == "onnxruntime":
        return onnxruntime_engine(args, x)
    import kuiper

    name, _, device = name.partition("@")  # opencl@Intel: that device, whatever --device says
    backend, _, schedule = name.partition("-")
    options = ({"device": device or args.device, "schedule": schedule, "precision": args.precision}
               if backend == "opencl" else {})
    graph = kuiper.load(MODEL_DIR / "resnet18.pnnx.param", backend=backend, **{k: v for k, v in options.items() if v})
    label = f"kuiper-{name}" + (f" ({graph.backend})" if backend == "auto" else "")
    label += f"-{args.precision}" if args.precision != "fp32" else ""
    if graph.backend == "opencl":
        from kuiper.opencl import describe

        device = graph.runtime.device
        label += f" ({describe(device)['name']}, {device.platform.name.strip()})"
    return label, lambda: graph.forward(x)[0]


def onnxruntime_engine(args, x):
    """onnxruntime on the same weights, exported to ONNX once (into the user's cache)."""
    from onnx_engine import export_onnx, onnxruntime_forward

    path = Path.home() / ".cache" / "kuiper" / "benchmarks" / "resnet18.onnx"
    if path.exists() and path.stat().st_mtime < (MODEL_DIR / "resnet18.pnnx.bin").stat().st_mtime:
        path.unlink()  # the model was exported again since
    if not path.exists():
        import torch

        from tools.export_models import build_model
        export_onnx(build_model("resnet18"), torch.from_numpy(x[:1]), path)
    engine = onnxruntime_forward(path, args.threads)
    return engine and (engine[0], lambda: engine[1](x))


def cuda_graph_forward(torch, model, tx, device, half: bool):
    """The model captured once as a CUDA graph on a static input: each forward copies the input in, replays the
    graph and copies the logits out, with none of eager mode's launches from Python."""
    static = torch.empty(tx.shape, device=device, dtype=torch.float16 if half else torch.float32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):  # warm-up on a side stream, as capture requires
            model(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(static)

    def forward():
        static.copy_(tx.to(device))
        graph.replay()
        return out.float().cpu().numpy()
    return forward


def torch_engine(args, x, graphs: bool = False):
    try:
        import torch

        from tools.export_models import build_model
    except ImportError as e:
        print(f"torch not available ({e}); not timing it")
        return None
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    device = torch.device(args.torch_device)
    half = args.precision == "fp16"
    model = build_model("resnet18").to(device)
    model = model.half() if half else model
    tx = torch.from_numpy(x)

    def forward():
        with torch.no_grad():
            x_device = tx.to(device)
            return model(x_device.half() if half else x_device).float().cpu().numpy()  # .cpu() waits for the GPU

    if graphs:
        forward = cuda_graph_forward(torch, model, tx, device, half)
    mode = "cuda-graphs" if graphs else "eager"
    label = f"torch-{torch.__version__}-{mode}-{args.torch_device}"
    label += f"-{args.precision}" if args.precision != "fp32" else ""
    if device.type == "cuda":
        label += f" ({torch.cuda.get_device_name(device)})"
    return label, forward


if __name__ == "__main__":
    main()
