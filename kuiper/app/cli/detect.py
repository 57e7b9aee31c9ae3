"""`kuiper detect`: a YOLO model exported by pnnx on pictures; boxes drawn, listed as JSON, or scored against
labels (mAP)."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import kuiper
from kuiper import detection
from kuiper.app import images, labels
from kuiper.app.cli.common import BACKEND_HELP, CliError, positive, require, rich_console, say_backend
from kuiper.core.errors import ImageError, KuiperWarning, ShapeError
from kuiper.detection.dataset import label_path, read_labels
from kuiper.detection.yolo import FORMATS
from kuiper.runtime.auto import AUTO, CHOICES

NAMES_FILE = "names.txt"  # class names beside a model's .param, used when --names is not given
# ultralytics' validation settings, used with --labels unless --conf/--iou say otherwise: every box counts
EVALUATION = {"conf": 0.001, "iou": 0.7}
PREDICTION = {"conf": 0.25, "iou": 0.45}
DRAWN_SUFFIXES = (".jpg", ".jpeg", ".png")  # a drawn picture keeps its type when it is one of these, else PNG


def threshold(text: str) -> float:
    """An argparse type: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1")
    return value


def add_parser(sub, common, custom) -> None:
    """The detect command and its options."""
    det = sub.add_parser("detect", parents=[common, custom],
                         help="find objects with a YOLO model (boxes drawn, JSON, or mAP against labels)")
    det.add_argument("model", help="a .pnnx.param of a YOLO detector (exported from ultralytics: docs/detection.md)")
    det.add_argument("--input", required=True, metavar="IMAGE|FOLDER", help="a picture, or a folder of them")
    det.add_argument("--out", metavar="DIR", help="write each picture with its boxes drawn, and NAME.json beside it")
    det.add_argument("--conf", type=threshold,
                     help=f"keep boxes scoring above this (default {PREDICTION['conf']}; {EVALUATION['conf']} "
                          f"with --labels)")
    det.add_argument("--iou", type=threshold,
                     help=f"suppress boxes overlapping a better one of their class by more than this (default "
                          f"{PREDICTION['iou']}; {EVALUATION['iou']} with --labels)")
    det.add_argument("--max-det", type=positive, default=300, help="at most this many boxes per picture (300)")
    det.add_argument("--names", metavar="FILE", help=f"class names, one per line (default: {NAMES_FILE} beside "
                                                     f"the model, else class indices)")
    det.add_argument("--format", choices=FORMATS, help="the output's layout (default: told from its shape)")
    det.add_argument("--labels", metavar="DIR",
                     help="YOLO label files (NAME.txt per picture): print the mAP of the detections")
    det.add_argument("--json", action="store_true", help="print one JSON object instead of the text")
    det.add_argument("--backend", default=AUTO, choices=CHOICES, help=BACKEND_HELP)
    det.add_argument("--device", help="OpenCL device: P:D or a name substring")
    det.set_defaults(func=cmd_detect)


def cmd_detect(args) -> None:
    param, source = Path(args.model), Path(args.input)
    require(param, "model")
    require(source, "input")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise CliError(f"--out {out}: it is a file; give a folder (made if missing)")
    label_dir = Path(args.labels) if args.labels else None
    if label_dir is not None and not label_dir.is_dir():
        raise CliError(f"--labels {label_dir}: not a folder of label files")
    if not source.is_dir() and not images.is_image(source):
        raise CliError(f"--input {source}: not a picture ({' '.join(images.IMAGE_SUFFIXES)}) or a folder of them")
    paths = images.find_images(source) if source.is_dir() else [source]
    settings = EVALUATION if label_dir is not None else PREDICTION
    conf = settings["conf"] if args.conf is None else args.conf
    iou = settings["iou"] if args.iou is None else args.iou
    graph = kuiper.load(param, backend=args.backend, device=args.device, custom_ops=args.custom_op)
    say_backend(graph)
    try:
        detector = detection.Detector(graph, _names(param, args.names), conf, iou, args.max_det, args.format,
                                      multi_label=label_dir is not None)
    except ShapeError as e:
        raise CliError(f"{param}: not a YOLO detector: {e}") from None
    evaluation = detection.Evaluation() if label_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    results, skipped = [], []
    for path in paths:
        try:
            picture = images.read_picture(path)
        except ImageError as e:
            if len(paths) == 1:
                raise
            warnings.warn(f"skipped {e}", KuiperWarning, stacklevel=2)
            skipped.append(str(path))
            continue
        found = _detect(detector, picture, param)
        record = {"image": str(path), "width": picture.width, "height": picture.height,
                  "detections": found.as_dicts(detector.names)}
        if evaluation is not None:
            evaluation.add(found, *read_labels(label_path(path, label_dir), picture.width, picture.height))
        if out is not None:
            suffix = path.suffix.lower() if path.suffix.lower() in DRAWN_SUFFIXES else ".png"
            detection.draw(picture, found, detector.names).save(out / f"{path.stem}{suffix}")
            (out / f"{path.stem}.json").write_text(json.dumps(record, indent=1) + "\n")
        results.append(record)
    if not results:
        raise CliError(f"--input {source}: none of its {len(paths)} picture(s) could be read")
    score = _score(evaluation.result(), detector.names) if evaluation is not None else None
    if args.json:
        print(json.dumps({"model": str(param), "backend": graph.backend, "conf": conf, "iou": iou,
                          "images": results, "skipped": skipped, "out": args.out,
                          **({} if score is None else {"map": score})}))
        return
    _print(rich_console(), results, skipped, score, out, conf, iou)


def _names(param: Path, given):
    """--names, else names.txt beside the model, else None."""
    if given:
        return labels.read_names(given)
    beside = param.parent / NAMES_FILE
    return labels.read_names(beside) if beside.exists() else None


def _detect(detector, picture, param: Path):
    try:
        return detector.detect(picture)
    except ShapeError as e:  # the output is no YOLO output
        raise CliError(f"{param}: not a YOLO detector: {e}") from None


def _score(result, names) -> dict:
    name = lambda c: names[c] if names is not None and c < len(names) else str(c)
    return {"map50": result.map50, "map50_95": result.map50_95, "pictures": result.pictures,
            "classes": [{"class": int(c), "name": name(int(c)), "labels": int(n), "ap50": float(ap[0]),
                         "ap50_95": float(ap.mean())} for c, n, ap in zip(result.classes, result.labels, result.ap)]}


def _print(console, results: list, skipped: list, score, out, conf: float, iou: float) -> None:
    if score is None or len(results) <= 20:  # an evaluation over many pictures prints its score only
        for record in results:
            found = ", ".join(f"{d['name']} {d['score']:.2f} [{', '.join(f'{v:.0f}' for v in d['box'])}]"
                              for d in record["detections"])
            console.print(f"{record['image']}: {len(record['detections'])} found" + (f": {found}" if found else ""),
                          highlight=False)
    kept = f", {len(skipped)} skipped (unreadable)" if skipped else ""
    console.print(f"{len(results)} picture(s), conf {conf:g}, iou {iou:g}{kept}"
                  + (f"; drawn with their boxes in {out}" if out is not None else ""), highlight=False)
    if score is not None:
        console.print(f"mAP50 {score['map50']:.4f}  mAP50-95 {score['map50_95']:.4f} over {score['pictures']} "
                      f"labelled picture(s)", highlight=False)
        for row in score["classes"]:
            console.print(f"  {row['name']:<16} labels {row['labels']:>5}  AP50 {row['ap50']:.4f}  "
                          f"AP50-95 {row['ap50_95']:.4f}", highlight=False)
