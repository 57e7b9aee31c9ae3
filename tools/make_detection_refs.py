"""Tiny YOLO models exported with pnnx, and ultralytics' and torchvision's answers that kuiper's detection is
tested against.

    python tools/make_detection_refs.py        # with ultralytics, torch, torchvision and pnnx installed

Models (random weights and BatchNorm statistics, scaled layer by layer so that every output depends on the
input and a wrong layer shows, see spread_weights; into models/ and models/manifest.json, whose cases
tests/runtime/test_model_outputs*.py run on every backend):

    yolov8_tiny/    ultralytics' yolov8.yaml at width 1/16 (channels 8 to 16), 20 classes, input 1x3x64x96;
                    output (1, 24, 126)
    yolov5u_tiny/   ultralytics' yolov5.yaml (the anchor-free YOLOv5u head) at the same scale, input 1x3x64x64;
                    output (1, 24, 84)

Each case's input is a synthetic picture (tools/synthetic_shapes.py) letterboxed by kuiper; its output is
torch's. References, into tests/detection/refs/:

    raw_outputs.npz    YOLO outputs: the two models' own (random weights: many large, overlapping boxes), and crafted
                       ones with planted objects (several anchors per object, jittered, overlapping objects of
                       the same and of other classes, weak background), in both layouts: "yolov8" (B, 4+C, N)
                       and classic "yolov5" (B, N, 5+C, with objectness)
    nms_results.npz    ultralytics.utils.nms.non_max_suppression on each output, for each setting in
                       nms_settings.json, per image: rows of x1, y1, x2, y2, score, class (classic YOLOv5
                       outputs are given to it as boxes and objectness x class probability, the scores the
                       YOLOv5 repository's NMS ranks by)
    torchvision_nms.npz  random boxes and scores with torchvision.ops.nms's and batched_nms's kept indices
    scale_boxes.npz    letterbox geometry: for picture and input sizes, ultralytics' LetterBox padding and
                       scale_boxes applied to random boxes
    ap.npz             random detections and labels over 30 pictures, ultralytics' matching (the detection
                       validator's match_predictions) and ap_per_class
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("YOLO_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kuiper.app.export import randomize, run_pnnx  # noqa: E402
from kuiper.detection.letterbox import letterbox  # noqa: E402
from tools.export_models import operator_types  # noqa: E402
from tools.synthetic_shapes import make_image  # noqa: E402

REFS = ROOT / "tests" / "detection" / "refs"
MODELS = ROOT / "models"
TINY_WIDTH = 0.0625
TINY_MAX_CHANNELS = 256  # x TINY_WIDTH: at most 16 channels
SPREAD = 1.0  # the standard deviation of every random layer's output on the first case
TINY_CLASSES = 20
# non_max_suppression settings compared: the predictor's defaults, the validator's, class-agnostic, few kept
NMS_SETTINGS = [
    {"conf": 0.25, "iou": 0.45, "multi_label": False, "agnostic": False, "max_det": 300},
    {"conf": 0.001, "iou": 0.7, "multi_label": True, "agnostic": False, "max_det": 300},
    {"conf": 0.25, "iou": 0.45, "multi_label": False, "agnostic": True, "max_det": 300},
    {"conf": 0.1, "iou": 0.5, "multi_label": False, "agnostic": False, "max_det": 5},
]


# ---- models ------------------------------------------------------------------------------------------------
def scaled_yaml(family: str, width: float, classes: int, out: Path, max_channels: int = 1024) -> Path:
    """ultralytics' cfg/models/<family>.yaml at depth 0.33, this width and max_channels, for this many classes."""
    import ultralytics
    import yaml

    cfg = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg" / "models" / f"{family}.yaml").read_text())
    cfg.update(nc=classes, scales={"n": [0.33, width, max_channels]}, scale="n")
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def for_export(model):
    """A DetectionModel as ultralytics' exporter prepares it: eval, BatchNorm folded, the head returning the
    decoded (1, 4 + classes, anchors) tensor alone, C2f splitting rather than chunking."""
    from ultralytics.nn.modules import C2f, Detect

    model = model.float().eval().fuse(verbose=False)
    for m in model.modules():
        if isinstance(m, Detect):
            m.dynamic, m.export, m.format = False, True, "torchscript"
        elif isinstance(m, C2f):
            m.forward = m.forward_split
    return model


def export(model, x: np.ndarray, out: Path, name: str) -> None:
    """pnnx on the model for input x. A first forward makes the head keep its anchors and strides for this
    input size (as ultralytics' exporter does with its dry runs), so they enter the graph as constants."""
    torch_output(model, x)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_pnnx(model, [x], Path(tmp), name, out / "pnnx.log")
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.move(str(Path(tmp) / f"{name}{suffix}"), out / f"{name}{suffix}")


def torch_output(model, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def save_cases(model, name: str, cases: dict) -> list:
    """CASE_in0.npy and torch's CASE_out0.npy for each case; the manifest's list of them."""
    listed = []
    for case, x in cases.items():
        np.save(MODELS / name / f"{case}_in0.npy", x)
        np.save(MODELS / name / f"{case}_out0.npy", torch_output(model, x))
        listed.append({"name": case, "inputs": [f"{name}/{case}_in0.npy"], "outputs": [f"{name}/{case}_out0.npy"]})
    return listed


def record(name: str, generator: str, description: str, cases: list, random_weights: bool) -> None:
    """The model's entry in models/manifest.json (tools/export_models.py keeps entries that name another tool)."""
    path = MODELS / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["models"][name] = {
        "generator": generator, "param": f"{name}/{name}.pnnx.param", "bin": f"{name}/{name}.pnnx.bin",
        "description": description, "operator_types": operator_types(MODELS / name / f"{name}.pnnx.param"),
        "cases": cases, "random_weights": random_weights,
    }
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def spread_weights(model, x: np.ndarray, seed: int) -> None:
    """Random convolution weights, zero biases and random BatchNorm statistics, then, layer by layer on input x,
    every BatchNorm (and every convolution without one) scaled so that its output has standard deviation
    SPREAD. With torch's default initialisation the activations shrink layer by layer, and with the head's
    biases (class scores near e^-10) the output of a random model hardly depends on its input: a wrong layer
    would not show. Unscaled random statistics make them grow instead, past what half precision holds."""
    import torch
    from ultralytics.nn.modules import DFL

    generator = torch.Generator().manual_seed(seed)
    fixed = {id(m.conv) for m in model.modules() if isinstance(m, DFL)}  # its weights are the bins 0..15
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d) and id(m) not in fixed:
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator))
                if m.bias is not None:
                    m.bias.zero_()
    randomize(model, seed=seed)

    def scaled(layer, inputs, output):
        factor = SPREAD / (float(output.std()) or 1.0)
        layer.weight.mul_(factor)
        if layer.bias is not None:
            layer.bias.mul_(factor)
        return output * factor

    hooks = [m.register_forward_hook(scaled) for m in model.modules()
             if isinstance(m, torch.nn.BatchNorm2d) or (isinstance(m, torch.nn.Conv2d) and m.bias is not None
                                                         and id(m) not in fixed)]
    with torch.no_grad():
        model.eval()(torch.from_numpy(x))
    for hook in hooks:
        hook.remove()


def picture(seed: int) -> np.ndarray:
    image, _ = make_image(np.random.default_rng(seed))
    return np.asarray(image)


def tiny_model(family: str, name: str, shape: tuple, seed: int) -> np.ndarray:
    """Builds, randomizes, exports and records one tiny model; returns its output on the first case."""
    import torch
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = scaled_yaml(family, TINY_WIDTH, TINY_CLASSES, Path(tmp) / f"{name}.yaml", TINY_MAX_CHANNELS)
        model = DetectionModel(str(cfg), verbose=False)
    cases = {"picture": letterbox(picture(seed), shape).input(),
             "other": letterbox(picture(seed + 10), shape).input()}
    spread_weights(model, cases["picture"], seed)
    model = for_export(model)
    shutil.rmtree(MODELS / name, ignore_errors=True)
    export(model, cases["picture"], MODELS / name, name)
    listed = save_cases(model, name, cases)
    out = np.load(MODELS / name / "picture_out0.npy")
    record(name, "tools/make_detection_refs.py",
           f"ultralytics' {family}.yaml at width {TINY_WIDTH}, depth 0.33 and {TINY_MAX_CHANNELS} channels at most "
           f"for {TINY_CLASSES} classes, random weights (BatchNorm randomized, folded), exported as ultralytics "
           f"exports it: input 1x3x{shape[0]}x{shape[1]}, output {tuple(out.shape)} of cx, cy, w, h and class "
           f"scores; two letterboxed synthetic pictures.", listed, True)
    return out


# ---- decode and NMS references -------------------------------------------------------------------------------
def crafted(rng: np.random.Generator, images: int, anchors: int, classes: int, size: tuple) -> tuple:
    """(boxes xywh (B, N, 4), class scores (B, N, C)): a few objects, each predicted by several anchors with
    jittered boxes and one strong class, among weak background anchors."""
    h, w = size
    boxes = np.stack([rng.uniform(0, w, (images, anchors)), rng.uniform(0, h, (images, anchors)),
                      rng.uniform(2, w / 3, (images, anchors)), rng.uniform(2, h / 3, (images, anchors))], -1)
    scores = rng.uniform(0, 0.3, (images, anchors, classes)) ** 2
    for b in range(images):
        slots = rng.permutation(anchors)
        used = 0
        for _ in range(rng.integers(4, 9)):
            c = int(rng.integers(classes))
            centre = rng.uniform([0.1 * w, 0.1 * h], [0.9 * w, 0.9 * h])
            extent = rng.uniform([0.08 * w, 0.08 * h], [0.45 * w, 0.45 * h])
            strength = rng.uniform(0.35, 0.95)
            for _ in range(rng.integers(3, 8)):  # this object's anchors
                a = slots[used]
                used += 1
                boxes[b, a] = [*(centre + rng.normal(0, 0.06, 2) * extent), *(extent * rng.uniform(0.8, 1.25, 2))]
                scores[b, a, c] = strength * rng.uniform(0.5, 1.0)
                if rng.random() < 0.3:  # a second class on the same box
                    scores[b, a, (c + 1) % classes] = strength * rng.uniform(0.3, 0.9)
    return boxes.astype(np.float32), scores.astype(np.float32)


def raw_outputs(v8_out: np.ndarray, v5u_out: np.ndarray) -> dict:
    """name -> (format, output) of every YOLO output the NMS references are made from."""
    rng = np.random.default_rng(1)
    outputs = {"yolov8_tiny": ("yolov8", v8_out), "yolov5u_tiny": ("yolov8", v5u_out)}
    boxes, scores = crafted(rng, 2, 400, 6, (160, 160))
    outputs["crafted_yolov8"] = ("yolov8", np.concatenate([boxes, scores], -1).transpose(0, 2, 1).copy())
    boxes, scores = crafted(rng, 2, 300, 3, (96, 128))
    objectness = rng.uniform(0.5, 1.0, scores.shape[:2] + (1,)).astype(np.float32)
    probabilities = np.clip(scores / objectness, 0, 1).astype(np.float32)  # objectness x this ~ the scores
    outputs["crafted_yolov5"] = ("yolov5", np.concatenate([boxes, objectness, probabilities], -1))
    return outputs


def as_ultralytics(format: str, output: np.ndarray):
    """The (B, 4 + C, N) tensor ultralytics' NMS takes: classic YOLOv5 rows become boxes and objectness x
    class probability, computed in float32 as YOLOv5's NMS does."""
    import torch

    x = torch.from_numpy(output)
    if format == "yolov5":
        x = torch.cat([x[..., :4], x[..., 5:] * x[..., 4:5]], -1).transpose(1, 2)
    return x


def nms_references(outputs: dict) -> dict:
    from ultralytics.utils.nms import non_max_suppression

    results = {}
    for name, (format, output) in outputs.items():
        for k, setting in enumerate(NMS_SETTINGS):
            found = non_max_suppression(as_ultralytics(format, output), conf_thres=setting["conf"],
                                        iou_thres=setting["iou"], multi_label=setting["multi_label"],
                                        agnostic=setting["agnostic"], max_det=setting["max_det"])
            for b, rows in enumerate(found):
                results[f"{name}/{k}/{b}"] = rows.numpy()
    return results


def random_boxes(rng: np.random.Generator, n: int, low, high, smallest: float, largest: float) -> np.ndarray:
    """n xyxy float32 boxes: corners uniform in [low, high), sides uniform in [smallest, largest)."""
    corner = rng.uniform(low, high, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(smallest, largest, (n, 2))], 1).astype(np.float32)


def torchvision_references() -> dict:
    import torch
    import torchvision

    rng = np.random.default_rng(2)
    boxes = random_boxes(rng, 300, 0, 200, 5, 60)
    scores = rng.random(300).astype(np.float32)
    classes = rng.integers(0, 4, 300)
    refs = {"boxes": boxes, "scores": scores, "classes": classes}
    for t in (0.3, 0.5, 0.7):
        refs[f"nms_{t}"] = torchvision.ops.nms(torch.from_numpy(boxes), torch.from_numpy(scores), t).numpy()
        refs[f"batched_{t}"] = torchvision.ops.batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores),
                                                           torch.from_numpy(classes), t).numpy()
    return refs


def scale_box_references() -> dict:
    import torch
    from ultralytics.data.augment import LetterBox
    from ultralytics.utils.ops import scale_boxes

    rng = np.random.default_rng(3)
    refs = {}
    pairs = [((480, 640), (640, 640)), ((640, 480), (640, 640)), ((120, 160), (160, 160)), ((333, 517), (160, 160)),
             ((100, 37), (64, 96)), ((720, 1280), (384, 640)), ((50, 60), (160, 160))]
    for k, (picture_shape, input_shape) in enumerate(pairs):
        h, w = picture_shape
        params = LetterBox(input_shape, auto=False)(image=np.zeros((h, w, 3), np.uint8)).shape
        geometry = LetterBox(input_shape, auto=False).get_params({"img": np.zeros((h, w, 3), np.uint8)})
        boxes = random_boxes(rng, 20, -10, [input_shape[1], input_shape[0]], 1, 80)
        mapped = scale_boxes(input_shape, torch.from_numpy(boxes.copy()), picture_shape).numpy()
        refs[f"{k}/picture"] = np.asarray(picture_shape)
        refs[f"{k}/input"] = np.asarray(input_shape)
        refs[f"{k}/padded"] = np.asarray(params[:2])
        refs[f"{k}/pad"] = np.asarray([geometry["left"], geometry["top"]])
        refs[f"{k}/boxes"] = boxes
        refs[f"{k}/mapped"] = mapped
    # one picture that fits without resizing: ultralytics' letterboxed pixels themselves
    image = picture(5)
    refs["pixels/picture"] = image
    refs["pixels/letterboxed"] = LetterBox((160, 160), auto=False)(image=image[..., ::-1].copy())[..., ::-1].copy()
    return refs


def ap_references() -> dict:
    import torch
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.utils.metrics import ap_per_class, box_iou

    rng = np.random.default_rng(4)
    validator = DetectionValidator()
    validator.iouv = torch.linspace(0.5, 0.95, 10)
    refs, correct_all, conf_all, pred_all, target_all = {}, [], [], [], []
    for i in range(30):
        n_labels, n_pred = int(rng.integers(0, 8)), int(rng.integers(0, 15))
        labels = random_boxes(rng, n_labels, 0, 100, 5, 40)
        label_cls = rng.integers(0, 4, n_labels)
        # detections: jittered labels (some of the wrong class) and strays, best first
        source = rng.integers(0, max(n_labels, 1), n_pred)
        pred = labels[source] + rng.normal(0, 4, (n_pred, 4)).astype(np.float32) if n_labels else \
            np.zeros((n_pred, 4), np.float32)
        stray = rng.random(n_pred) < 0.3
        pred[stray] = random_boxes(rng, int(stray.sum()), 0, 100, 5, 40)
        pred[:, 2:] = np.maximum(pred[:, 2:], pred[:, :2] + 1)
        pred_cls = np.where(rng.random(n_pred) < 0.8, label_cls[source] if n_labels else 0, rng.integers(0, 4, n_pred))
        conf = np.sort(rng.random(n_pred).astype(np.float32))[::-1].copy()
        if n_labels and n_pred:
            correct = validator.match_predictions(torch.from_numpy(pred_cls), torch.from_numpy(label_cls),
                                                  box_iou(torch.from_numpy(labels), torch.from_numpy(pred))).numpy()
        else:
            correct = np.zeros((n_pred, 10), bool)
        for key, value in (("labels", labels), ("label_cls", label_cls), ("pred", pred.astype(np.float32)),
                           ("pred_cls", pred_cls), ("conf", conf), ("correct", correct)):
            refs[f"{i}/{key}"] = value
        for gathered, value in zip((correct_all, conf_all, pred_all, target_all), (correct, conf, pred_cls, label_cls)):
            gathered.append(value)
    results = ap_per_class(np.concatenate(correct_all), np.concatenate(conf_all), np.concatenate(pred_all),
                           np.concatenate(target_all))
    refs["ap"], refs["ap_classes"] = results[5], results[6]
    return refs


# ---- the trained detector (tools/train_detector.py) ----------------------------------------------------------
def export_trained_detector(weights: Path, data: Path, out: Path, name: str, imgsz: int, classes, training: dict,
                            samples: int = 6) -> None:
    """Exports trained ultralytics weights into `out` with names.txt, sample test pictures and their labels,
    ultralytics' detections on each sample (samples/expected.json) and a manifest entry."""
    import torch
    from PIL import Image
    from ultralytics import YOLO
    from ultralytics.utils.nms import non_max_suppression
    from ultralytics.utils.ops import scale_boxes

    model = for_export(YOLO(str(weights)).model)
    shutil.rmtree(out, ignore_errors=True)
    (out / "samples" / "labels").mkdir(parents=True)
    pictures = sorted((data / "images" / "test").glob("*.png"))[:samples]
    expected = {}
    for path in pictures:
        shutil.copy(path, out / "samples" / path.name)
        shutil.copy(data / "labels" / "test" / f"{path.stem}.txt", out / "samples" / "labels" / f"{path.stem}.txt")
        pixels = np.asarray(Image.open(path).convert("RGB"))
        x = letterbox(pixels, imgsz).input()
        rows = non_max_suppression(torch.from_numpy(torch_output(model, x)), 0.25, 0.45)[0]
        rows[:, :4] = scale_boxes((imgsz, imgsz), rows[:, :4], pixels.shape[:2])
        expected[path.name] = rows.numpy().round(4).tolist()
    first = letterbox(np.asarray(Image.open(pictures[0]).convert("RGB")), imgsz).input()
    export(model, first, out, name)
    listed = save_cases(model, name, {"b1": first})
    (out / "names.txt").write_text("".join(f"{c}\n" for c in classes))
    (out / "samples" / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (out / "training.json").write_text(json.dumps(training, indent=2) + "\n")
    record(name, "tools/train_detector.py",
           f"A YOLOv8-style detector (ultralytics' yolov8.yaml at width {training['width']}) trained by "
           f"tools/train_detector.py on synthetic shapes ({', '.join(classes)}); input 1x3x{imgsz}x{imgsz}, a "
           f"letterboxed test picture.", listed, False)


def main() -> None:
    v8_out = tiny_model("v8/yolov8", "yolov8_tiny", (64, 96), seed=0)
    v5u_out = tiny_model("v5/yolov5", "yolov5u_tiny", (64, 64), seed=1)
    REFS.mkdir(parents=True, exist_ok=True)
    outputs = raw_outputs(v8_out, v5u_out)
    np.savez_compressed(REFS / "raw_outputs.npz", **{name: out for name, (_, out) in outputs.items()})
    (REFS / "nms_settings.json").write_text(json.dumps({
        "settings": NMS_SETTINGS, "formats": {name: format for name, (format, _) in outputs.items()}}, indent=1))
    np.savez_compressed(REFS / "nms_results.npz", **nms_references(outputs))
    np.savez_compressed(REFS / "torchvision_nms.npz", **torchvision_references())
    np.savez_compressed(REFS / "scale_boxes.npz", **scale_box_references())
    np.savez_compressed(REFS / "ap.npz", **ap_references())
    print(f"wrote {REFS} and models/yolov8_tiny, models/yolov5u_tiny")


if __name__ == "__main__":
    main()
