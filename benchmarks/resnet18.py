"""ResNet-18 forward time: kuiper next to torch eager, each validated before it is timed.

    python benchmarks/resnet18.py [--batch 1] [--runs 20] [--warmup 3] [--threads 2] [--backend numpy]

Both sides run the same weights (tools/export_models.build_model rebuilds the exported torch model), and
both are first checked against the PyTorch output saved in models/ (llm.c's habit: never time a wrong
kernel). torch is optional: without it only kuiper is timed. Prints one line per engine: median and
best of `--runs` forwards after `--warmup` untimed ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1, choices=(1, 3, 8), help="a batch with saved references")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="BLAS / torch threads")
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--no-torch", action="store_true", help="time kuiper only")
    args = parser.parse_args()

    # thread counts must be fixed before numpy (and its BLAS) is imported
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import kuiper

    model_dir = ROOT / "models" / "resnet18"
    x = np.load(model_dir / f"b{args.batch}_in0.npy")
    reference = np.load(model_dir / f"b{args.batch}_out0.npy")

    graph = kuiper.load(model_dir / "resnet18.pnnx.param", backend=args.backend)
    results = [("kuiper-" + args.backend, lambda: graph.forward(x)[0])]
    if not args.no_torch:
        try:
            import torch

            from tools.export_models import build_model
        except ImportError as e:
            print(f"torch not available ({e}); timing kuiper only")
        else:
            torch.set_num_threads(args.threads)
            model = build_model("resnet18")
            tx = torch.from_numpy(x)

            def torch_forward():
                with torch.no_grad():
                    return model(tx).numpy()

            results.append((f"torch-{torch.__version__}-eager", torch_forward))

    print(f"ResNet-18, batch {args.batch}, {args.threads} thread(s), median of {args.runs} after {args.warmup} warm-up")
    for name, forward in results:
        out = forward()
        tolerance = 1e-4 * max(1.0, float(np.abs(reference).max()))
        if not np.allclose(out, reference, rtol=1e-4, atol=tolerance):
            raise SystemExit(f"{name}: output does not match the saved reference; not timing it")
        for _ in range(args.warmup):
            forward()
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            forward()
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        print(f"  {name:<28} median {median * 1e3:8.2f} ms   best {min(times) * 1e3:8.2f} ms   "
              f"{args.batch / median:8.1f} images/s")


if __name__ == "__main__":
    main()
