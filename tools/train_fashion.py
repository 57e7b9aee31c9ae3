"""Train a small CNN on Fashion-MNIST, export it with pnnx, and write it with sample images into models/.

    apt-get install dataset-fashion-mnist          # Debian's package of the data set (MIT licence)
    python tools/train_fashion.py [--minutes 5] [--threads 2] [--out models/fashion_cnn]

Needs torch, pnnx and Pillow (the `export` and `image` extras). The images are read from the idx files Debian
installs, with numpy (tools/fashion_data.py). Each image becomes a (1, 28, 28) float32 array exactly as
`kuiper run --input IMAGE.png` prepares the same picture saved as a PNG, following the model's
preprocess.json: the 8-bit value divided by 255, minus the training set's mean, divided by its standard deviation.
Training stops when its time is up (Adam, batches of 128, a fresh shuffle each epoch, the learning rate
decayed by a half cosine over the time); then torch's accuracy over all 10,000 test images is measured and
the model exported.

Into OUT/ it writes:

    fashion_cnn.pnnx.param, .pnnx.bin   the graph and its trained weights
    CASE_in0.npy, CASE_out0.npy         test images as the model takes them and torch's logits (the manifest's
                                        cases, which tests/runtime/test_model_outputs*.py check on every backend)
    samples/<class>/NNNNN.png           a few test images per class, 28x28 grayscale, named by their test index
    labels.txt                          the ten class names, in class-index order (also the samples' folders)
    preprocess.json                     the preparation and the class names' file, which `kuiper run` reads
    training.json                       how it was trained, torch's test accuracy, the preparation, and torch's
                                        class for every sample PNG

and the model's entry in models/manifest.json.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kuiper.app.export import run_pnnx  # noqa: E402  (shared with `kuiper export`)
from tools.export_models import operator_types  # noqa: E402
from tools.fashion_data import CLASSES, PACKAGE, load  # noqa: E402

SAMPLES_PER_CLASS = 4
NAME = "fashion_cnn"


def prepare(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    """uint8 (N, 28, 28) to the model's (N, 1, 28, 28) float32, in the order of operations kuiper's image
    preparation uses, so that a PNG of the same pixels gives the same array."""
    x = images.astype(np.float32) / np.float32(255.0)
    x = (x - np.float32(mean)) / np.float32(std)
    return np.ascontiguousarray(x[:, None])


class FashionCNN(nn.Module):
    """Three blocks of 3x3 convolution, BatchNorm, ReLU and 2x2 max pooling (28 -> 14 -> 7 -> 3), then one
    Linear over the flattened 64x3x3 features: about 29,000 weights."""

    def __init__(self, classes: int = len(CLASSES)):
        super().__init__()
        widths = (1, 16, 32, 64)
        self.blocks = nn.Sequential(*[
            nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                          nn.MaxPool2d(2))
            for cin, cout in zip(widths, widths[1:])
        ])
        self.fc = nn.Linear(64 * 3 * 3, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.blocks(x), 1))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seconds: float, seed: int) -> dict:
    """Adam over shuffled batches until `seconds` have passed, its learning rate falling along a half cosine of
    the time spent (a run of any length ends on small steps); returns steps, epochs and the time taken."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    started, steps, epochs = time.monotonic(), 0, 0
    while time.monotonic() - started < seconds:
        order = torch.randperm(len(x), generator=g)
        for start in range(0, len(x), 128):
            batch = order[start:start + 128]
            for group in opt.param_groups:
                group["lr"] = 1e-3 * (1 + math.cos(math.pi * min(1.0, (time.monotonic() - started) / seconds)))
            loss = F.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            if steps % 200 == 0:
                print(f"step {steps}, epoch {epochs}, loss {loss.item():.3f}", flush=True)
            if time.monotonic() - started >= seconds:
                break
        else:
            epochs += 1
    model.eval()
    return {"steps": steps, "epochs_completed": epochs, "minutes": round((time.monotonic() - started) / 60, 2)}


@torch.no_grad()
def predict(model: nn.Module, x: np.ndarray) -> np.ndarray:
    return np.concatenate([model(torch.from_numpy(x[i:i + 1000])).argmax(1).numpy() for i in range(0, len(x), 1000)])


def save_samples(out: Path, images: np.ndarray, labels: np.ndarray, predicted: np.ndarray) -> dict:
    """The first SAMPLES_PER_CLASS test images of each class as PNGs; {relative path: torch's class index}."""
    from PIL import Image

    saved = {}
    for c, name in enumerate(CLASSES):
        folder = out / "samples" / name
        folder.mkdir(parents=True)
        for i in np.flatnonzero(labels == c)[:SAMPLES_PER_CLASS]:
            path = folder / f"{i:05d}.png"
            Image.fromarray(images[i], mode="L").save(path, optimize=True)
            saved[path.relative_to(out).as_posix()] = int(predicted[i])
    return saved


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="training time (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "models" / NAME)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    train_images, train_labels = load("train")
    test_images, test_labels = load("t10k")
    # the statistics of the scaled training pixels, rounded so that `kuiper run --mean --std` can say them
    mean = round(float(train_images.mean() / 255.0), 4)
    std = round(float(train_images.std() / 255.0), 4)
    x_train = torch.from_numpy(prepare(train_images, mean, std))
    x_test = prepare(test_images, mean, std)

    model = FashionCNN()
    run = train(model, x_train, torch.from_numpy(train_labels), args.minutes * 60, args.seed)
    predicted = predict(model, x_test)
    accuracy = float((predicted == test_labels).mean())
    print(f"torch test accuracy {accuracy:.4f} over {len(test_labels)} images ({run})")

    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # cases: the first test images, at batch 1 and 8 (the folder runs' default batch)
    cases = {"b1": x_test[:1], "b8": x_test[:8]}
    with tempfile.TemporaryDirectory() as tmp:
        run_pnnx(model, [cases["b1"]], Path(tmp), NAME, out / "pnnx.log")
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.move(str(Path(tmp) / f"{NAME}{suffix}"), out / f"{NAME}{suffix}")
    entry_cases = []
    with torch.no_grad():
        for case, x in cases.items():
            np.save(out / f"{case}_in0.npy", x)
            np.save(out / f"{case}_out0.npy", model(torch.from_numpy(x)).numpy())
            entry_cases.append({"name": case, "inputs": [f"{NAME}/{case}_in0.npy"],
                                "outputs": [f"{NAME}/{case}_out0.npy"]})

    (out / "labels.txt").write_text("".join(name + "\n" for name in CLASSES))
    preparation = {"resize": 28, "crop": 28, "mean": mean, "std": std}
    (out / "preprocess.json").write_text(json.dumps({**preparation, "channels": 1, "labels": "labels.txt"},
                                                    indent=2) + "\n")
    samples = save_samples(out, test_images, test_labels, predicted)
    (out / "training.json").write_text(json.dumps({
        "generator": "tools/train_fashion.py",
        "dataset": PACKAGE,
        "torch_version": torch.__version__,
        "threads": args.threads, "seed": args.seed, **run,
        "torch_test_accuracy": accuracy, "test_images": int(len(test_labels)),
        "preparation": preparation,
        "sample_predictions": samples,
    }, indent=2) + "\n")

    manifest_path = out.parent / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        manifest["models"][NAME] = {
            "generator": "tools/train_fashion.py",  # tools/export_models.py keeps entries that name another tool
            "param": f"{NAME}/{NAME}.pnnx.param",
            "bin": f"{NAME}/{NAME}.pnnx.bin",
            "description": "A small CNN trained on Fashion-MNIST by tools/train_fashion.py: three blocks of "
                           "Conv2d, BatchNorm (folded), ReLU and MaxPool2d, then Linear; 1x28x28 grayscale in, "
                           "ten logits out; test images at batch 1 and 8.",
            "operator_types": operator_types(out / f"{NAME}.pnnx.param"),
            "cases": entry_cases,
            "random_weights": False,
        }
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
