"""The Detector end to end on the trained shapes model's sample pictures: the same boxes as ultralytics' own
post-processing of PyTorch's output for the same letterboxed picture (models/shapes_yolo/samples/expected.json,
written by tools/train_detector.py), on numpy and on every usable OpenCL device."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import kuiper
from kuiper import detection
from kuiper.core.errors import ShapeError
from kuiper.opencl.devices import spec_of

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "models" / "shapes_yolo"
MODEL = SHAPES / "shapes_yolo.pnnx.param"
EXPECTED = json.loads((SHAPES / "samples" / "expected.json").read_text())
NAMES = (SHAPES / "names.txt").read_text().split()


def assert_detects_as_ultralytics(detector):
    from PIL import Image

    for name, rows in sorted(EXPECTED.items()):
        expected = np.asarray(rows, np.float32).reshape(-1, 6)
        found = detector.detect(Image.open(SHAPES / "samples" / name))
        assert len(found) == len(expected), name
        np.testing.assert_allclose(found.boxes, expected[:, :4], atol=0.02, err_msg=name)
        np.testing.assert_allclose(found.scores, expected[:, 4], atol=1e-3, err_msg=name)
        np.testing.assert_array_equal(found.classes, expected[:, 5].astype(np.int64), err_msg=name)


def test_samples_hold_objects_and_the_detector_finds_them():
    assert sum(len(rows) for rows in EXPECTED.values()) >= len(EXPECTED)


def test_detector_on_numpy_matches_ultralytics():
    assert_detects_as_ultralytics(detection.load(MODEL, names=NAMES, backend="numpy"))


def test_detector_on_opencl_matches_ultralytics(cl_runtime):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kuiper.KuiperWarning)
        graph = kuiper.load(MODEL, backend="opencl", device=spec_of(cl_runtime.device))
    assert_detects_as_ultralytics(detection.Detector(graph, NAMES))


def test_a_graph_of_two_inputs_is_no_detector():
    graph = kuiper.load(ROOT / "models" / "expr_two_inputs" / "expr_two_inputs.pnnx.param", backend="numpy")
    with pytest.raises(ShapeError, match="a detector takes one"):
        detection.Detector(graph)
