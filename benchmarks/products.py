"""A Linear layer's product of a few rows by its weights on OpenCL, every kernel variant that can run it, each
checked against numpy before it is timed: the shapes of a language model's decode step.

    python benchmarks/products.py [--device SPEC] [--precision fp32|fp16] [--rows 1,4,16]
                                  [--shapes 896x896,896x4864,...] [--repeats 9]

A shape KxN is in_features x out_features. Prints, per shape and row count, each variant's median device time
(profiling events, kuiper/opencl/tuning.py's `measure`) and the bandwidth it reaches reading the weights once:
K * N elements of the storage precision over that time. The rule's choice is marked with *.
"""

from __future__ import annotations

import argparse

import numpy as np

#: the products of a decode step at Qwen2.5-0.5B's and Llama-3.2-1B's shapes (attention, MLP, lm_head)
SHAPES = "896x896,896x4864,4864x896,896x151936,2048x2048,2048x8192,8192x2048,2048x128256"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="OpenCL device (kuiper devices)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "fp16"))
    parser.add_argument("--rows", default="1,4,16", help="rows of the input, comma-separated")
    parser.add_argument("--shapes", default=SHAPES, help="in_features x out_features, comma-separated")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs of each variant")
    args = parser.parse_args()

    from kuiper.opencl import get_runtime
    from kuiper.opencl.registry import opencl_class
    from kuiper.opencl.tuning import measure
    from kuiper.runtime.backends import make_layer

    rt = get_runtime(args.device).at_precision(args.precision)
    rng = np.random.default_rng(0)
    element = 2 if args.precision == "fp16" else 4
    print(f"{rt.device.name.strip()} ({rt.device.platform.name.strip()}), {args.precision}")
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.lower().split("x"))
        weight = rng.uniform(-1, 1, (n, k)).astype(np.float32) / np.sqrt(k)
        params = dict(in_features=k, out_features=n, bias=False)
        for rows in (int(r) for r in args.rows.split(",")):
            x = rng.uniform(-1, 1, (1, rows, k)).astype(np.float32)
            layer = opencl_class("nn.Linear")(make_layer("nn.Linear", params=params, attrs={"weight": weight},
                                                         input_shapes=[x.shape]).op)
            layer.build_opencl(rt)
            expected = x @ weight.T
            names = layer.variants.candidates((x.shape,))
            for name in names:  # never time a wrong kernel
                got = layer.run_opencl(rt, x, variant=name)[0]
                error = float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))
                if error > (1e-2 if args.precision == "fp16" else 1e-4):
                    raise SystemExit(f"{shape} rows={rows} {name}: wrong, max error {error:.2e} of the largest")
            seconds = measure(layer, (x.shape,), names, repeats=args.repeats)
            rule = layer.variants.rule((x.shape,))
            cells = [f"{name}{'*' if name == rule else ''} {t * 1e3:.4f} ms {k * n * element / t / 1e9:.0f} GB/s"
                     for name, t in sorted(seconds.items(), key=lambda item: item[1])]
            print(f"{shape:>12} rows={rows:<3} " + " | ".join(cells[:5]), flush=True)


if __name__ == "__main__":
    main()
