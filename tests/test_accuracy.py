"""A labelled folder (ImageFolder's DIR/<class>/*.png) scored by `kuiper run`: accuracy and the confusion matrix,
checked against a count made here from each image's own row; and the trained Fashion-MNIST model giving, on
its sample PNGs, the classes torch gave them."""

import json
from pathlib import Path

import numpy as np
import pytest

from kuiper.app import accuracy, labels
from kuiper.app.cli import main
from kuiper.core.errors import ConfigError

from conftest import MODELS

Image = pytest.importorskip("PIL.Image")

FASHION = MODELS / "fashion_cnn"


def run(argv, capsys) -> tuple:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_confusion_counts_pairs_and_keeps_the_classes_that_occur():
    rng = np.random.default_rng(3)
    truths, predicted = rng.integers(2, 7, 50), rng.integers(0, 5, 50)
    classes = [f"c{i}" for i in range(9)]
    report = accuracy.confusion(truths, predicted, classes)
    assert report.indices == list(range(7)) and report.classes == classes[:7]  # 7 and 8 never occur
    for r in range(7):
        for c in range(7):
            assert report.matrix[r, c] == sum(1 for t, p in zip(truths, predicted) if (t, p) == (r, c))
    assert report.images == 50 and report.correct == int((truths == predicted).sum())
    assert report.recall()[0] is None and report.recall()[2] == pytest.approx(np.mean(predicted[truths == 2] == 2))
    text = accuracy.table(report)
    assert text.splitlines()[3].split()[:9] == ["2", "c2", *map(str, report.matrix[2])]
    assert text.splitlines()[-1] == f"accuracy {report.accuracy:.2%} ({report.correct} of 50 images)"
    assert accuracy.as_dict(report)["matrix"] == report.matrix.tolist()
    with pytest.raises(ConfigError, match="the model predicted class 9, but there are 9 classes"):
        accuracy.confusion([0], [9], classes)


def labelled_folder(root: Path, classes: dict, size=(40, 30)) -> Path:
    """{class name: images} as ImageFolder lays them out, random RGB pictures."""
    rng = np.random.default_rng(5)
    for name, count in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def test_a_labelled_folder_reports_accuracy_and_the_matrix_its_rows_give(tmp_path, capsys):
    folder = labelled_folder(tmp_path / "pets", {"tench": 2, "goldfish": 3, "tabby": 1})
    names = labels.imagenet_classes()
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n")
    status, out, err = run(["run", "--input", str(folder), "--labels", str(tmp_path / "names.txt"), "--json",
                            "--plot", str(tmp_path / "matrix.png")], capsys)
    assert status == 0 and not err
    result = json.loads(out)
    report = result["accuracy"]
    # the count made here: each row's true class from its subfolder, its predicted class the best one
    pairs = [(names.index(Path(row["path"]).parent.name), row["indices"][0]) for row in result["rows"]]
    kept = sorted({i for pair in pairs for i in pair})
    assert report["indices"] == kept and report["classes"] == [names[i] for i in kept]
    assert report["matrix"] == [[pairs.count((r, c)) for c in kept] for r in kept]
    assert report["images"] == 6 and report["correct"] == sum(t == p for t, p in pairs)
    assert report["accuracy"] == report["correct"] / 6
    with Image.open(tmp_path / "matrix.png") as plot:
        side = len(kept) * accuracy.CELL
        assert plot.format == "PNG" and plot.width > side and plot.height > side
    status, out, _ = run(["run", "--input", str(folder), "--labels", str(tmp_path / "names.txt")], capsys)
    assert status == 0 and f"accuracy {report['accuracy']:.2%} ({report['correct']} of 6 images)" in out
    assert "true \\ predicted" in out


def test_without_labels_the_sorted_subfolders_are_the_classes(tmp_path):
    folder = labelled_folder(tmp_path / "set", {"b": 1, "a": 2})
    (folder / "a" / "deeper").mkdir()
    Image.new("L", (4, 4)).save(folder / "a" / "deeper" / "x.png")
    (folder / "a" / "notes.txt").write_text("not an image")
    found = accuracy.labelled_images(folder)
    assert found.classes == ["a", "b"] and found.truths == [0, 0, 0, 1]
    assert [p.relative_to(folder).as_posix() for p in found.paths] == ["a/0.png", "a/1.png", "a/deeper/x.png",
                                                                        "b/0.png"]
    assert accuracy.is_labelled(folder) and not accuracy.is_labelled(folder / "a")
    with pytest.raises(ConfigError, match="subfolder\\(s\\) b are not among the 2 class names"):
        accuracy.labelled_images(folder, ["a", "c"])


def test_plot_needs_a_labelled_folder(tmp_path, capsys):
    folder = labelled_folder(tmp_path / "set", {"a": 1})
    status, _, err = run(["run", "--input", str(folder / "a"), "--plot", str(tmp_path / "m.png")], capsys)
    assert status == 1 and "has images, not class subfolders" in err


# ---- the trained Fashion-MNIST model ---------------------------------------------------------------------
def fashion_args(training: dict) -> list:
    prep = training["preparation"]
    return ["run", str(FASHION / "fashion_cnn.pnnx.param"), "--input", str(FASHION / "samples"), "--labels",
            str(FASHION / "labels.txt"), "--resize", str(prep["resize"]), "--crop", str(prep["crop"]),
            "--mean", str(prep["mean"]), "--std", str(prep["std"])]


def test_fashion_samples_get_the_classes_torch_gave_them(capsys):
    training = json.loads((FASHION / "training.json").read_text())
    status, out, err = run([*fashion_args(training), "--json"], capsys)
    assert status == 0 and not err
    result = json.loads(out)
    predicted = {Path(row["path"]).relative_to(FASHION).as_posix(): row["indices"][0] for row in result["rows"]}
    assert predicted == training["sample_predictions"]
    names = labels.read_names(FASHION / "labels.txt")
    right = sum(names[p] == Path(path).parent.name for path, p in training["sample_predictions"].items())
    assert result["accuracy"]["correct"] == right and result["accuracy"]["images"] == len(predicted)
    assert result["random_weights"] is False


def test_three_numbers_for_a_grayscale_model_are_one_line(capsys):
    training = json.loads((FASHION / "training.json").read_text())
    status, _, err = run([*fashion_args(training), "--mean", "0.3,0.3,0.3"], capsys)
    assert status == 1 and err.strip() == ("kuiper: error: --mean '0.3,0.3,0.3': the model takes grayscale images "
                                           "(one channel): give one number")
