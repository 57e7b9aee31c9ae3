"""kuiper's accuracy over all 10,000 Fashion-MNIST test images, beside torch's (from training.json).

    python tools/fashion_accuracy.py [--backend numpy] [--keep DIR]

Reads the test set's idx files (Debian's dataset-fashion-mnist: tools/fashion_data.py), writes every
image as a PNG into a labelled folder (DIR/<class>/NNNNN.png) and runs `kuiper run --input DIR` on it with
the model's preparation, so that the number comes through the same path as any user's folder: PNG decoding,
preparation, batches, the confusion matrix. Needs Pillow, not torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kuiper.app.cli import main as kuiper_main  # noqa: E402
from tools.fashion_data import CLASSES, load  # noqa: E402

MODEL = ROOT / "models" / "fashion_cnn"


def write_folder(root: Path) -> int:
    from PIL import Image

    images, labels = load("t10k")
    for name in CLASSES:
        (root / name).mkdir(parents=True)
    for i, (pixels, label) in enumerate(zip(images, labels)):
        Image.fromarray(pixels, mode="L").save(root / CLASSES[label] / f"{i:05d}.png")
    return len(labels)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--keep", type=Path, help="write the PNGs here and keep them (default: a temporary folder)")
    args = parser.parse_args(argv)
    training = json.loads((MODEL / "training.json").read_text())
    prep = training["preparation"]
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory())) / "t10k"
        count = write_folder(root)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = kuiper_main(["run", str(MODEL / "fashion_cnn.pnnx.param"), "--input", str(root), "--labels",
                                  str(MODEL / "labels.txt"), "--backend", args.backend, "--batch", "100",
                                  "--resize", str(prep["resize"]), "--crop", str(prep["crop"]),
                                  "--mean", str(prep["mean"]), "--std", str(prep["std"]), "--json"])
        if status != 0:
            raise SystemExit(status)
    report = json.loads(out.getvalue())["accuracy"]
    print(f"{count} test images; kuiper ({args.backend}): {report['accuracy']:.4f} ({report['correct']} right), "
          f"torch: {training['torch_test_accuracy']:.4f}, difference "
          f"{abs(report['accuracy'] - training['torch_test_accuracy']):.4%}")


if __name__ == "__main__":
    main()
