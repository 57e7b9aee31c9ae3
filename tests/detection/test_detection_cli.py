"""`kuiper detect`: pictures drawn with their boxes, JSON, mAP against labels, and one-line errors."""

import json
from pathlib import Path

import numpy as np
import pytest

from test_cli import run  # (status, stdout, stderr) of `kuiper ARGV`, run in this process

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "models" / "shapes_yolo"
MODEL = SHAPES / "shapes_yolo.pnnx.param"
SAMPLES = SHAPES / "samples"
EXPECTED = json.loads((SAMPLES / "expected.json").read_text())
TINY = ROOT / "models" / "yolov8_tiny" / "yolov8_tiny.pnnx.param"


def test_a_picture_is_drawn_and_its_boxes_written_as_json(tmp_path, capsys):
    name = sorted(EXPECTED)[0]
    status, out, err = run(["detect", str(MODEL), "--input", str(SAMPLES / name), "--out", str(tmp_path)], capsys)
    assert status == 0, err
    record = json.loads((tmp_path / f"{Path(name).stem}.json").read_text())
    expected = np.asarray(EXPECTED[name]).reshape(-1, 6)
    assert len(record["detections"]) == len(expected) > 0
    np.testing.assert_allclose([d["box"] for d in record["detections"]], expected[:, :4], atol=0.02)
    names = (SHAPES / "names.txt").read_text().split()
    assert [d["name"] for d in record["detections"]] == [names[int(c)] for c in expected[:, 5]]
    assert (record["width"], record["height"]) == (160, 120) or (record["width"], record["height"]) == (120, 160)
    from PIL import Image

    drawn = np.asarray(Image.open(tmp_path / name).convert("RGB"))
    original = np.asarray(Image.open(SAMPLES / name).convert("RGB"))
    assert drawn.shape == original.shape and (drawn != original).any(axis=2).mean() > 0.01  # frames and tabs
    assert f"{len(expected)} found" in out


def test_a_folder_gives_one_json_on_stdout(capsys):
    status, out, _ = run(["detect", str(MODEL), "--input", str(SAMPLES), "--json", "--conf", "0.5"], capsys)
    assert status == 0
    result = json.loads(out)
    assert [Path(r["image"]).name for r in result["images"]] == sorted(EXPECTED)
    assert result["conf"] == 0.5 and all(d["score"] > 0.5 for r in result["images"] for d in r["detections"])


def test_labels_give_the_map_of_the_samples(capsys):
    status, out, _ = run(["detect", str(MODEL), "--input", str(SAMPLES), "--labels", str(SAMPLES / "labels"),
                          "--json"], capsys)
    assert status == 0
    score = json.loads(out)["map"]
    assert score["pictures"] == len(EXPECTED) and 0.5 < score["map50"] <= 1.0
    assert {row["name"] for row in score["classes"]} <= set((SHAPES / "names.txt").read_text().split())
    status, out, _ = run(["detect", str(MODEL), "--input", str(SAMPLES), "--labels", str(SAMPLES / "labels")],
                         capsys)
    assert status == 0 and f"mAP50 {score['map50']:.4f}" in out and "conf 0.001, iou 0.7" in out


def test_an_unreadable_picture_in_a_folder_is_skipped(tmp_path, capsys):
    (tmp_path / "broken.png").write_bytes(b"not a png")
    name = sorted(EXPECTED)[0]
    (tmp_path / name).write_bytes((SAMPLES / name).read_bytes())
    status, out, err = run(["detect", str(MODEL), "--input", str(tmp_path)], capsys)
    assert status == 0 and "1 skipped" in out and "broken.png" in err


@pytest.mark.parametrize("argv, said", [
    (["detect", "missing.pnnx.param", "--input", "x.png"], "model file not found: missing.pnnx.param"),
    (["detect", str(MODEL), "--input", "missing.png"], "input file not found: missing.png"),
    (["detect", str(MODEL), "--input", str(SHAPES / "names.txt")], "not a picture"),
    (["detect", str(ROOT / "models/resnet18/resnet18.pnnx.param"), "--input", str(SAMPLES)], "not a YOLO detector"),
    (["detect", str(MODEL), "--input", str(SAMPLES), "--labels", "missing"], "--labels missing: not a folder"),
    (["detect", str(TINY), "--input", str(SAMPLES), "--names", str(SHAPES / "names.txt")],
     "4 class names, but the model's output (1, 24, 126) has 20 classes"),
])
def test_bad_input_is_one_line(argv, said, capsys):
    status, _, err = run(argv, capsys)
    assert status == 1 and said in err and len(err.strip().splitlines()) == 1, err


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    status, _, err = run(["detect", str(MODEL), "--input", str(SAMPLES), "--out", str(tmp_path / "file")], capsys)
    assert status == 1 and "--out" in err and "is a file" in err


def test_thresholds_are_checked_by_the_parser(capsys):
    status, _, err = run(["detect", str(MODEL), "--input", str(SAMPLES), "--iou", "-0.1"], capsys)
    assert status == 2 and "not a number from 0 to 1" in err


def test_a_malformed_label_line_names_its_file_and_line(tmp_path, capsys):
    name = sorted(EXPECTED)[0]
    (tmp_path / f"{Path(name).stem}.txt").write_text("0 0.5 0.5 0.2 0.2\ncircle 0.5 0.5 0.2 0.2\n")
    status, _, err = run(["detect", str(MODEL), "--input", str(SAMPLES / name), "--labels", str(tmp_path)], capsys)
    assert status == 1 and f"{Path(name).stem}.txt:2: a label line is `class cx cy w h`" in err
    assert len(err.strip().splitlines()) == 1
