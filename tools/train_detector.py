"""Train a small YOLOv8-style detector on synthetic shapes with ultralytics, export it with pnnx into models/.

    nice python tools/train_detector.py [--minutes 15] [--threads 2] [--work /tmp/shapes_yolo_work]
    python tools/train_detector.py --export-only [--work ...]     # export the weights a run left in WORK

Needs ultralytics, torch and pnnx (never the package or its tests). The data set comes from
tools/synthetic_shapes.py (2,000 training, 200 validation and 200 test pictures, 160 x 120 or 120 x 160). The model
is ultralytics' yolov8.yaml with its width scaled to an eighth (channels 8 to 128) for four classes; ultralytics
trains it on the CPU at imgsz 160 for the minutes given (its `time` option: the schedule fits the time), with
plots off and nothing downloaded. Then ultralytics validates the best weights on the test split (mAP50 at
conf 0.001, IoU 0.7), and the model is exported for a 1 x 3 x 160 x 160 input.

Into OUT/ (models/shapes_yolo) it writes:

    shapes_yolo.pnnx.param, .pnnx.bin   the graph (output (1, 8, 525): cx, cy, w, h and four class scores)
    names.txt                           the class names, one a line, in class-index order
    samples/NNNNN.png                   a few test pictures (labels in samples/labels/, YOLO format)
    samples/expected.json               ultralytics' detections on each (its NMS on PyTorch's output for the
                                        letterboxed picture, conf 0.25, IoU 0.45, boxes in picture pixels)
    b1_in0.npy, b1_out0.npy             the first sample letterboxed and torch's output (the manifest's case)
    training.json                       how it was trained and ultralytics' test-split metrics

and the model's entry in models/manifest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")  # no update checks, no hub, no asset downloads

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tools.synthetic_shapes import CLASSES, write_dataset  # noqa: E402

NAME = "shapes_yolo"
IMGSZ = 160
WIDTH = 0.125


def model_yaml(work: Path) -> Path:
    """ultralytics' yolov8.yaml at depth 0.33, width WIDTH, for len(CLASSES) classes."""
    import ultralytics
    import yaml

    cfg = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg/models/v8/yolov8.yaml").read_text())
    cfg["nc"] = len(CLASSES)
    cfg["scales"] = {"n": [0.33, WIDTH, 1024]}
    cfg["scale"] = "n"
    path = work / "yolov8-shapes.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def offline_ultralytics():
    """ultralytics with its font check (which downloads Arial.ttf when missing) made a no-op."""
    import ultralytics.data.utils

    ultralytics.data.utils.check_font = lambda *args, **kwargs: None
    from ultralytics import YOLO

    return YOLO


def train(work: Path, data: Path, minutes: float, seed: int) -> dict:
    YOLO = offline_ultralytics()
    model = YOLO(str(model_yaml(work)), task="detect")
    started = time.monotonic()
    model.train(data=str(data), imgsz=IMGSZ, epochs=300, time=minutes / 60, batch=32, workers=1, device="cpu",
                plots=False, amp=False, cache="ram", project=str(work), name="train", exist_ok=True, seed=seed,
                patience=1000, verbose=True)
    return {"minutes": round((time.monotonic() - started) / 60, 2)}


def validate(weights: Path, data: Path) -> dict:
    """ultralytics' own metrics on the test split, as its validator computes them."""
    YOLO = offline_ultralytics()
    metrics = YOLO(str(weights)).val(data=str(data), split="test", imgsz=IMGSZ, batch=1, conf=0.001, iou=0.7,
                                     device="cpu", plots=False, rect=False, save_json=False)
    return {"map50": float(metrics.box.map50), "map50_95": float(metrics.box.map),
            "per_class_ap50": {CLASSES[int(c)]: float(a) for c, a in zip(metrics.box.ap_class_index,
                                                                         metrics.box.ap50)}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="training time (default 15)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/shapes_yolo_work"))
    parser.add_argument("--out", type=Path, default=ROOT / "models" / NAME)
    parser.add_argument("--export-only", action="store_true", help="export the weights a run left in WORK")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    work = args.work.resolve()
    data = work / "data" / "data.yaml"
    run_file = work / "run.json"
    if not args.export_only:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        write_dataset(work / "data", {"train": 2000, "val": 200, "test": 200}, seed=args.seed)
        run = train(work, data, args.minutes, args.seed)
        run_file.write_text(json.dumps(run))
    run = json.loads(run_file.read_text())
    weights = work / "train" / "weights" / "best.pt"
    run["ultralytics_test"] = validate(weights, data)
    print(json.dumps(run, indent=2))
    # the export helper lives with the reference maker, imported here so a run can be re-exported alone
    from tools.make_detection_refs import export_trained_detector

    export_trained_detector(weights, work / "data", args.out.resolve(), NAME, IMGSZ, CLASSES, {
        "generator": "tools/train_detector.py", "dataset": "tools/synthetic_shapes.py (seed %d)" % args.seed,
        "imgsz": IMGSZ, "width": WIDTH, "threads": args.threads, **run})


if __name__ == "__main__":
    main()
