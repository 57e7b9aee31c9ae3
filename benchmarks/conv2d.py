"""ResNet-18's convolutions one by one: the variant Conv2d's rule picks (kuiper/cpu/conv2d.py) next to im2col alone.

    python benchmarks/conv2d.py [--batch 1] [--runs 20] [--threads 2]

Each layer runs alone on a random input of the shape it meets in the model, first checked against its
im2col result, then timed with the two paths alternating (so that a noisy machine slows both alike).
Prints one line per layer, median milliseconds of each path, and the totals.
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
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="BLAS threads")
    args = parser.parse_args()

    # thread counts must be fixed before numpy (and its BLAS) is imported
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import kuiper
    from kuiper.core.variants import shape_key

    graph = kuiper.load(ROOT / "models" / "resnet18" / "resnet18.pnnx.param", backend="numpy")
    plan = graph.plan_for((args.batch, 3, 224, 224))
    rng = np.random.default_rng(0)

    print(f"ResNet-18 convolutions, batch {args.batch}, {args.threads} thread(s), median of {args.runs} (ms)")
    totals = {"picked": 0.0, "im2col": 0.0}
    for op in graph.unfused_order:  # the file's operators: a fused one's convolution is still its own here
        if op.type != "nn.Conv2d":
            continue
        layer = op.layer  # the fast CPU Conv2d (kuiper/cpu/conv2d.py), its variants chosen per input shape
        shapes = shape_key([plan.shapes[op.input_operands[0].name]])
        x = rng.standard_normal(shapes[0]).astype(np.float32)
        outs = {name: np.empty(layer.output_shapes(shapes)[0], np.float32) for name in totals}
        variants = {"picked": layer.variants.rule(shapes), "im2col": "im2col"}
        for name in variants.values():
            layer.variants.fix(shapes, name)  # builds Winograd's weights now, not in a timed run

        def run(name):
            layer.variants.use(shapes, variants[name])
            layer.forward_numpy([x], [outs[name]])

        for name in totals:
            run(name)
        tolerance = 1e-4 * max(1.0, float(np.abs(outs["im2col"]).max()))
        if not np.allclose(outs["picked"], outs["im2col"], rtol=1e-4, atol=tolerance):
            raise SystemExit(f"{op.name}: the picked path does not match im2col; not timing it")
        times = {name: [] for name in totals}
        for _ in range(args.runs):
            for name in totals:
                started = time.perf_counter()
                run(name)
                times[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        for name in totals:
            totals[name] += medians[name]
        (kh, kw), (sh, _) = layer.kernel_size, layer.stride
        print(f"  {op.name:<12} {str(x.shape):<20} {kh}x{kw} s{sh}  {variants['picked']:<17} "
              f"{medians['picked']:7.2f}   im2col {medians['im2col']:7.2f}   "
              f"x{medians['im2col'] / medians['picked']:.2f}")
    print(f"  total{'':<50}{totals['picked']:7.2f}   im2col {totals['im2col']:7.2f}   "
          f"x{totals['im2col'] / totals['picked']:.2f}")


if __name__ == "__main__":
    main()
