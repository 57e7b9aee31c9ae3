"""The claims of lesson 25: the letterbox's geometry (one gain per side, the odd padding's extra pixel, pictures
that fit only padded), both YOLO output layouts and which is read from a shape, class-wise suppression by
offsets, the 0.995 of a perfect detector against the continuous rule's 1, and the commands of the notes."""

import numpy as np
import pytest

from kuiper.detection import Detections, Evaluation, decode, detect_format, letterbox, non_max_suppression
from kuiper.detection.nms import MAX_WH
from lesson_tools import check_shell_commands


def test_each_side_has_its_own_gain_and_odd_padding_goes_to_the_bottom():
    lb = letterbox(np.zeros((333, 517, 3), np.uint8), 160)
    assert lb.image.shape == (160, 160, 3)
    assert lb.gain == (160 / 517, 103 / 333) and lb.gain[0] != lb.gain[1]     # 333 x 160/517 = 103.05 -> 103
    assert lb.pad == (0, 28)                                                 # 57 rows: 28 above, 29 below
    assert (lb.image[:28] == 114).all() and (lb.image[28 + 103:] == 114).all() and lb.image[28:131].max() == 0


def test_a_picture_that_fits_is_only_padded():
    pixels = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    lb = letterbox(pixels, 160)
    np.testing.assert_array_equal(lb.image[20:140], pixels)
    assert lb.gain == (1.0, 1.0)


def test_the_two_layouts_and_the_shapes_they_are_read_from():
    assert detect_format((1, 84, 8400)) == "yolov8" and detect_format((1, 25200, 85)) == "yolov5"
    rows = np.array([[[10, 10, 4, 4, 0.5, 0.6, 0.2]]], np.float32)  # classic: objectness x probability
    (_, scores), = decode(rows, format="yolov5")
    np.testing.assert_allclose(scores, [[0.3, 0.1]], rtol=1e-6)


def test_boxes_of_other_classes_do_not_suppress_each_other():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11]], np.float32)
    scores = np.array([[0.9, 0.0], [0.0, 0.8]], np.float32)      # the same place, two classes
    assert len(non_max_suppression(boxes, scores)) == 2
    assert len(non_max_suppression(boxes, scores, agnostic=True)) == 1
    assert MAX_WH == 7680


def test_a_perfect_detector_scores_0995_by_101_points_and_1_by_all_points():
    boxes, classes = np.array([[0, 0, 10, 10]], np.float32), np.array([0])
    for method, expected in (("interp", 0.995), ("continuous", 1.0)):
        evaluation = Evaluation(method=method)
        evaluation.add(Detections(boxes, np.array([0.5], np.float32), classes), boxes, classes)
        assert evaluation.result().map50 == pytest.approx(expected)


def test_the_commands_in_the_notes(capsys):
    outputs = check_shell_commands(25, capsys)
    scored = [out for command, out in outputs.items() if "--labels" in command]
    assert scored and "mAP50" in scored[0]
