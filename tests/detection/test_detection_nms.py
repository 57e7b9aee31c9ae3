"""Decoding and NMS against ultralytics' and torchvision's own results on the same arrays
(tests/detection/refs/, saved by tools/make_detection_refs.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from kuiper.core.errors import ConfigError, ShapeError
from kuiper.detection import batched_nms, decode, detect_format, nms, non_max_suppression

REFS = Path(__file__).parent / "refs"
SETTINGS = json.loads((REFS / "nms_settings.json").read_text())
RAW = np.load(REFS / "raw_outputs.npz")
ULTRALYTICS = np.load(REFS / "nms_results.npz")
TORCHVISION = np.load(REFS / "torchvision_nms.npz")
CASES = [(name, k) for name in SETTINGS["formats"] for k in range(len(SETTINGS["settings"]))]


@pytest.mark.parametrize("name, k", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_decode_and_nms_give_ultralytics_detections(name, k):
    setting = SETTINGS["settings"][k]
    output = RAW[name]
    assert detect_format(output.shape) == SETTINGS["formats"][name]  # told from the shape alone
    for b, (boxes, scores) in enumerate(decode(output)):
        found = non_max_suppression(boxes, scores, **setting)
        expected = ULTRALYTICS[f"{name}/{k}/{b}"]
        assert len(found) == len(expected), f"{name} setting {k} image {b}"
        np.testing.assert_allclose(found.boxes, expected[:, :4], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(found.scores, expected[:, 4], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(found.classes, expected[:, 5].astype(np.int64))


def test_the_references_exercise_suppression():
    """The crafted outputs hold overlapping boxes that NMS removes, and more than one class per picture."""
    boxes, scores = decode(RAW["crafted_yolov8"])[0]
    candidates = int((scores.max(1) > 0.25).sum())
    kept = ULTRALYTICS["crafted_yolov8/0/0"]
    assert candidates > 2 * len(kept) > 0 and len(np.unique(kept[:, 5])) > 1


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_nms_keeps_what_torchvision_keeps(threshold):
    boxes, scores = TORCHVISION["boxes"], TORCHVISION["scores"]
    np.testing.assert_array_equal(nms(boxes, scores, threshold), TORCHVISION[f"nms_{threshold}"])
    np.testing.assert_array_equal(batched_nms(boxes, scores, TORCHVISION["classes"], threshold),
                                  TORCHVISION[f"batched_{threshold}"])


def test_classic_yolov5_scores_are_objectness_times_class():
    rows = np.zeros((1, 2, 7), np.float32)
    rows[0, 0] = [10, 10, 4, 6, 0.5, 0.8, 0.2]
    rows[0, 1] = [30, 20, 2, 2, 1.0, 0.1, 0.9]
    (boxes, scores), = decode(rows, format="yolov5")
    np.testing.assert_allclose(boxes[0], [8, 7, 12, 13])
    np.testing.assert_allclose(scores, [[0.4, 0.1], [0.1, 0.9]], rtol=1e-6)


def test_format_is_told_by_the_number_of_classes_when_given():
    assert detect_format((1, 84, 8400)) == "yolov8"
    assert detect_format((1, 25200, 85)) == "yolov5"
    assert detect_format((1, 9, 9), classes=5) == "yolov8"
    assert detect_format((1, 12, 10), classes=5) == "yolov5"  # 12 anchors of 10 values


@pytest.mark.parametrize("shape, format, classes, said", [
    ((84, 8400), None, None, "got shape (84, 8400)"),
    ((1, 3, 4), None, None, "no YOLO output"),
    ((1, 84, 8400), None, 3, "for 3 classes"),
    ((1, 84, 8400), "yolo9000", None, "format='yolo9000'"),
    ((1, 4, 100), "yolov8", None, "no class scores"),
])
def test_outputs_that_are_no_yolo_output_are_refused(shape, format, classes, said):
    with pytest.raises((ShapeError, ConfigError), match=said.replace("(", r"\(").replace(")", r"\)")):
        decode(np.zeros(shape, np.float32), format=format, classes=classes)


def test_thresholds_outside_zero_to_one_are_refused():
    with pytest.raises(ConfigError, match="conf=1.5"):
        non_max_suppression(np.zeros((1, 4)), np.ones((1, 2)), conf=1.5)
