"""BatchNorm2d's OpenCL variants shape by shape: each validated, then timed with profiling events.

    python benchmarks/batchnorm.py [--runs 20] [--device SPEC]

For every shape (ResNet-like layers, large planes, odd sizes) one layer runs alone on a random input. Each
variant is first checked against forward_numpy (llm.c's habit: never time a wrong kernel); then the variants
take turns for --runs rounds, each run timed by its kernel's profiling events (kuiper.opencl.tuning.measure).
Prints the median microseconds of each variant, the one the rule picks, and how many times faster the pick
runs than "plane", the single kernel kuiper had before variants.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(1, 64, 112, 112), (1, 64, 56, 56), (1, 128, 28, 28), (1, 256, 14, 14), (1, 512, 7, 7), (8, 512, 7, 7),
          (1, 1024, 2, 2), (1, 16, 224, 224), (1, 3, 224, 224), (2, 5, 33, 31), (3, 7, 1, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--device", help="OpenCL device (P:D or a name substring)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    import numpy as np

    import kuiper  # noqa: F401  (registers the layers)
    from kuiper.opencl import get_runtime
    from kuiper.runtime.backends import make_layer
    from kuiper.opencl.tuning import measure

    rt = get_runtime(args.device)
    rng = np.random.default_rng(0)
    kind = "a CPU" if rt.is_cpu else "not a CPU"
    print(f"BatchNorm2d on {rt.device.name.strip()} ({kind}), median of {args.runs} runs, microseconds")
    for i, shape in enumerate(SHAPES):
        c = shape[1]
        statistics = {"running_mean": rng.standard_normal(c), "running_var": rng.uniform(0.5, 2.0, c),
                      "weight": rng.standard_normal(c), "bias": rng.standard_normal(c)}
        layer = make_layer("nn.BatchNorm2d", backend="opencl", params={"num_features": c, "eps": 1e-5, "affine": True},
                           attrs={k: v.astype(np.float32) for k, v in statistics.items()}, input_shapes=[shape])
        layer.build_opencl(rt)
        names = list(layer.variants.by_name)
        if i == 0:
            print(f"{'shape':<18}" + "".join(f"{name:>10}" for name in names) + f"{'rule':>10}{'x plane':>10}")
        x = rng.standard_normal(shape, dtype=np.float32)
        expected = layer.run_numpy(x)[0]
        for name in names:
            (got,) = layer.run_opencl(rt, x, variant=name)
            if not np.allclose(got, expected, rtol=1e-6, atol=1e-6 * max(1.0, float(np.abs(expected).max()))):
                raise SystemExit(f"{shape}: variant {name} does not match forward_numpy; not timing it")
        seconds = measure(layer, (shape,), names, repeats=args.runs)
        picked = layer.variants.rule((shape,))
        print(f"{'x'.join(map(str, shape)):<18}" + "".join(f"{seconds[name] * 1e6:10.1f}" for name in names)
              + f"{picked:>10}{seconds['plane'] / seconds[picked]:10.2f}")


if __name__ == "__main__":
    main()
