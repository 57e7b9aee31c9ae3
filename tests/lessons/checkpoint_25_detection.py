"""Checkpoint of lesson 25: the IoU of exercises/lesson_25.py held to kuiper.detection's; its NMS to the indices
torchvision.ops.nms kept for the same boxes (saved in tests/detection/refs/) and to kuiper's; its letterbox
back-mapping to ultralytics' scale_boxes on saved boxes; its average precision to the AP ultralytics'
ap_per_class computed for saved detections."""

import numpy as np
import pytest

from kuiper import detection
from kuiper.detection.metrics import average_precision
from lesson_tools import ROOT, exercise

ex = exercise(25)
REFS = ROOT / "tests" / "detection" / "refs"
RNG = np.random.default_rng(25)


def random_boxes(n, size=100.0):
    corner = RNG.uniform(0, size, (n, 2))
    return np.concatenate([corner, corner + RNG.uniform(1, size / 2, (n, 2))], 1)


def test_iou_is_kuipers():
    a, b = random_boxes(30), random_boxes(20)
    np.testing.assert_allclose(ex.iou(a, b), detection.iou(a, b), rtol=1e-9, atol=1e-12)
    assert ex.iou(a, b).shape == (30, 20)


def test_iou_edge_cases():
    box = np.array([[0.0, 0.0, 10.0, 10.0]])
    np.testing.assert_allclose(ex.iou(box, box), [[1.0]])
    np.testing.assert_allclose(ex.iou(box, [[10.0, 0.0, 20.0, 10.0]]), [[0.0]])     # touching: no overlap
    np.testing.assert_allclose(ex.iou(box, [[5.0, 0.0, 15.0, 10.0]]), [[1 / 3]])
    np.testing.assert_allclose(ex.iou([[3.0, 3.0, 3.0, 3.0]], [[3.0, 3.0, 3.0, 3.0]]), [[0.0]])  # empty boxes


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_nms_keeps_what_torchvision_keeps(threshold):
    refs = np.load(REFS / "torchvision_nms.npz")
    kept = np.asarray(ex.nms(refs["boxes"], refs["scores"], threshold))
    np.testing.assert_array_equal(kept, refs[f"nms_{threshold}"])


def test_nms_is_kuipers_on_crowded_boxes():
    boxes = random_boxes(200, 60.0)
    scores = RNG.random(200)
    for threshold in (0.0, 0.25, 0.6, 1.0):
        np.testing.assert_array_equal(np.asarray(ex.nms(boxes, scores, threshold)),
                                      detection.nms(boxes, scores, threshold))


def test_letterbox_boxes_is_ultralytics_scale_boxes():
    refs = np.load(REFS / "scale_boxes.npz")
    pairs = sorted({key.split("/")[0] for key in refs.files if key[0].isdigit()}, key=int)
    for k in pairs:
        got = ex.letterbox_boxes(refs[f"{k}/boxes"], tuple(refs[f"{k}/picture"]), tuple(refs[f"{k}/input"]))
        np.testing.assert_allclose(got, refs[f"{k}/mapped"], rtol=1e-4, atol=1e-3, err_msg=f"pair {k}")


def test_letterbox_boxes_undoes_kuipers_letterbox():
    lb = detection.letterbox(np.zeros((333, 517, 3), np.uint8), (160, 224))
    boxes = np.array([[10.0, 20.0, 300.0, 200.0], [0.0, 0.0, 517.0, 333.0]])
    np.testing.assert_allclose(ex.letterbox_boxes(lb.to_input(boxes), (333, 517), (160, 224)), boxes, atol=1e-3)


def test_average_precision_is_ultralytics_ap50():
    refs = np.load(REFS / "ap.npz")
    pictures = sorted({int(key.split("/")[0]) for key in refs.files if key[0].isdigit()})
    correct = np.concatenate([refs[f"{i}/correct"][:, 0] for i in pictures])
    scores = np.concatenate([refs[f"{i}/conf"] for i in pictures])
    predicted = np.concatenate([refs[f"{i}/pred_cls"] for i in pictures])
    labelled = np.concatenate([refs[f"{i}/label_cls"] for i in pictures])
    for c, expected in zip(refs["ap_classes"], refs["ap"][:, 0]):
        mine = predicted == c
        order = np.argsort(-scores[mine], kind="stable")
        tp = np.cumsum(correct[mine][order])
        recall = tp / (labelled == c).sum()
        precision = tp / np.arange(1, len(tp) + 1)
        assert ex.average_precision(recall, precision) == pytest.approx(expected, abs=1e-9), f"class {c}"


def test_average_precision_is_kuipers_on_random_curves():
    for n in (1, 5, 40):
        hits = RNG.random(n) < 0.6
        recall = np.cumsum(hits) / max(hits.sum() + 2, 1)
        precision = np.cumsum(hits) / np.arange(1, n + 1)
        assert ex.average_precision(recall, precision) == pytest.approx(average_precision(recall, precision))
