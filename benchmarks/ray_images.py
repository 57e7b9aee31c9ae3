"""Images per second through kuiper on Ray Data (kuiper/app/ray_data.py) with 1 and 2 actors, beside the same
folder run in one process, as `kuiper run MODEL --input FOLDER` runs it.

    python benchmarks/ray_images.py [--images 3000] [--model fashion|resnet18] [--threads 1] [--repeat 2]

Makes a folder of --images PNGs (the Fashion-MNIST samples repeated, 28 x 28 grayscale; or for resnet18
random 256 x 256 RGB pictures), then times each way over the whole folder: files read, decoded, prepared,
classified. A Ray run's time counts its actors' start and graph load (as a real job pays them once), not
ray.init. Each actor gets --threads CPUs. Every run's classes are checked against the single process's
first. Prints the median of --repeat runs per way; docs/ray.md keeps the figures.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "fashion": ("models/fashion_cnn/fashion_cnn.pnnx.param", dict(resize=28, crop=28, mean=(0.286,), std=(0.353,),
                                                                 channels=1)),
    "resnet18": ("models/resnet18/resnet18.pnnx.param", {}),
}


def make_folder(folder: Path, count: int, model: str) -> list:
    import numpy as np
    from PIL import Image

    samples = sorted((ROOT / "models/fashion_cnn/samples").rglob("*.png"))
    rng = np.random.default_rng(0)
    for n in range(count):
        path = folder / f"{n:06d}.png"
        if model == "fashion":
            shutil.copyfile(samples[n % len(samples)], path)
        else:
            Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(path)
    return sorted(folder.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--model", choices=MODELS, default="fashion")
    parser.add_argument("--threads", type=int, default=1, help="CPUs (kuiper's and BLAS's threads) per actor")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    import ray

    import kuiper
    from kuiper.app import folder, ray_data
    from kuiper.app.images import Preprocess

    param, prep = MODELS[args.model]
    param = ROOT / param
    pre = Preprocess(**prep)
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_folder(Path(tmp), args.images, args.model)
        graph = kuiper.load(param, backend="numpy")  # as the Ray adapter runs it
        rates, reference = {}, None
        for n in range(args.repeat):
            started = time.perf_counter()
            run = folder.classify(graph, paths, pre, ray_data.BATCH)
            rates.setdefault(f"one process, {kuiper.num_threads()} thread(s)", []).append(
                len(paths) / (time.perf_counter() - started))
            reference = [row.indices[0] for row in run.rows]
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        for actors in (1, 2):
            for n in range(args.repeat):
                started = time.perf_counter()
                run = ray_data.classify_folder(param, tmp, actors=actors, threads=args.threads, preprocess=pre)
                rates.setdefault(f"Ray Data, {actors} actor(s) of {args.threads} CPU", []).append(
                    len(paths) / (time.perf_counter() - started))
                assert [row.indices[0] for row in run.rows] == reference, "Ray's classes differ"
        ray.shutdown()
    print(f"{param.name}, {args.images} images, median of {args.repeat}:")
    for way, values in rates.items():
        print(f"  {way}: {statistics.median(values):.0f} images/s")


if __name__ == "__main__":
    main()
