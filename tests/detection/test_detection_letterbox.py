"""Letterboxing and the way back, against ultralytics' LetterBox and scale_boxes (tests/detection/refs/)."""

from pathlib import Path

import numpy as np
import pytest

from kuiper.core.errors import ImageError
from kuiper.detection import letterbox

REFS = np.load(Path(__file__).parent / "refs" / "scale_boxes.npz")
PAIRS = sorted({key.split("/")[0] for key in REFS.files if key[0].isdigit()}, key=int)


@pytest.mark.parametrize("k", PAIRS)
def test_geometry_and_boxes_back_match_ultralytics(k):
    h, w = REFS[f"{k}/picture"]
    lb = letterbox(np.zeros((h, w, 3), np.uint8), tuple(int(v) for v in REFS[f"{k}/input"]))
    assert lb.image.shape[:2] == tuple(REFS[f"{k}/padded"])
    assert lb.pad == tuple(REFS[f"{k}/pad"])
    np.testing.assert_allclose(lb.to_original(REFS[f"{k}/boxes"]), REFS[f"{k}/mapped"], rtol=1e-4, atol=1e-4)


def test_pixels_of_a_picture_that_fits_match_ultralytics_exactly():
    lb = letterbox(REFS["pixels/picture"], 160)
    np.testing.assert_array_equal(lb.image, REFS["pixels/letterboxed"])
    x = lb.input()
    assert x.shape == (1, 3, 160, 160) and x.dtype == np.float32 and x.max() <= 1.0


def test_auto_pads_to_the_next_stride_multiple_and_boxes_round_trip():
    lb = letterbox(np.zeros((100, 150, 3), np.uint8), 640, stride=32, auto=True)
    assert lb.image.shape[:2] == (448, 640)  # 150 -> 640 wide, 100 -> 427 high, padded to 448
    boxes = np.array([[10, 20, 60, 90], [0, 0, 150, 100]], np.float32)
    np.testing.assert_allclose(lb.to_original(lb.to_input(boxes)), boxes, atol=1e-3)


def test_scaleup_false_never_enlarges():
    lb = letterbox(np.zeros((50, 60, 3), np.uint8), 160, scaleup=False)
    assert lb.gain == (1.0, 1.0) and lb.pad == (50, 55)


@pytest.mark.parametrize("array", [np.zeros((10, 10), np.uint8), np.zeros((10, 10, 3), np.float32),
                                   np.zeros((0, 10, 3), np.uint8)])
def test_what_is_no_picture_is_refused(array):
    with pytest.raises(ImageError, match="letterbox takes a picture"):
        letterbox(array, 64)
