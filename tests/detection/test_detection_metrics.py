"""mAP as ultralytics computes it: its validator's matching and ap_per_class on the same detections and labels
(tests/detection/refs/ap.npz, saved by tools/make_detection_refs.py)."""

from pathlib import Path

import numpy as np
import pytest

from kuiper.detection import Detections, Evaluation
from kuiper.detection.metrics import average_precision, match

REFS = np.load(Path(__file__).parent / "refs" / "ap.npz")
PICTURES = sorted({int(key.split("/")[0]) for key in REFS.files if key[0].isdigit()})


def picture(i):
    found = Detections(REFS[f"{i}/pred"], REFS[f"{i}/conf"], REFS[f"{i}/pred_cls"].astype(np.int64))
    return found, REFS[f"{i}/labels"], REFS[f"{i}/label_cls"]


@pytest.mark.parametrize("i", PICTURES)
def test_matching_marks_the_detections_ultralytics_marks(i):
    found, boxes, classes = picture(i)
    np.testing.assert_array_equal(match(found, boxes, classes), REFS[f"{i}/correct"])


def test_ap_per_class_and_map_equal_ultralytics():
    evaluation = Evaluation()
    for i in PICTURES:
        evaluation.add(*picture(i))
    result = evaluation.result()
    np.testing.assert_array_equal(result.classes, REFS["ap_classes"])
    np.testing.assert_allclose(result.ap, REFS["ap"], rtol=1e-9, atol=1e-12)
    assert 0.05 < result.map50 < 0.95  # neither trivial nor perfect: the reference tells something
    assert result.map50 == pytest.approx(float(REFS["ap"][:, 0].mean()))


def test_continuous_ap_is_the_area_under_the_envelope():
    # two labels: a hit (precision 1 at recall 0.5), a miss, a hit (precision 2/3 at recall 1)
    recall, precision = np.array([0.5, 0.5, 1.0]), np.array([1.0, 0.5, 2 / 3])
    assert average_precision(recall, precision, "continuous") == pytest.approx(0.5 + 0.5 * 2 / 3)


def test_a_perfect_detector_scores_one_and_a_blind_one_zero():
    boxes, classes = np.array([[0, 0, 10, 10], [20, 20, 40, 30]], np.float32), np.array([0, 1])
    perfect, continuous, blind = Evaluation(), Evaluation(method="continuous"), Evaluation()
    for evaluation in (perfect, continuous):
        evaluation.add(Detections(boxes, np.array([0.9, 0.8], np.float32), classes), boxes, classes)
    blind.add(Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)),
              boxes, classes)
    # the 101-point rule samples recall 1 past the curve's end, where precision is 0: a perfect AP is 0.995
    assert perfect.result().map50 == pytest.approx(0.995) and perfect.result().map50_95 == pytest.approx(0.995)
    assert continuous.result().map50 == pytest.approx(1.0)
    assert blind.result().map50 == 0.0 and list(blind.result().labels) == [1, 1]
