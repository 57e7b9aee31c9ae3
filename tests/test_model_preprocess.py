"""A model's preprocess.json (kuiper/app/model_preprocess.py): the Fashion-MNIST CNN's gives the preparation
its training recorded, so `kuiper run MODEL --input FOLDER` alone gives torch's classes; options override
the file; a file that cannot be used is one line naming the file and the key."""

import json
import shutil

import pytest

import kuiper
from kuiper.app import model_preprocess
from kuiper.app.cli import main
from kuiper.app.images import Preprocess
from kuiper.core.errors import ConfigError

from conftest import MODELS

FASHION = MODELS / "fashion_cnn"
PARAM = FASHION / "fashion_cnn.pnnx.param"
TRAINING = json.loads((FASHION / "training.json").read_text())


def run_json(argv, capsys) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_fashion_models_file_holds_its_training_preparation():
    prep = TRAINING["preparation"]
    pre, names = model_preprocess.for_graph(PARAM, kuiper.load(PARAM, backend="numpy"))
    assert pre == Preprocess(resize=prep["resize"], crop=prep["crop"], mean=(prep["mean"],), std=(prep["std"],),
                             channels=1)
    assert names == FASHION / "labels.txt"


def test_run_without_options_uses_the_models_file(capsys):
    pytest.importorskip("PIL.Image")
    prep = TRAINING["preparation"]
    short = run_json(["run", str(PARAM), "--input", str(FASHION / "samples")], capsys)
    predicted = {f"samples/{row['path'].split('samples/')[1]}": row["indices"][0] for row in short["rows"]}
    assert predicted == TRAINING["sample_predictions"]
    names = FASHION.joinpath("labels.txt").read_text().split()  # the file's "labels"
    assert all(row["labels"][0] == names[row["indices"][0]] for row in short["rows"])
    spelled = run_json(["run", str(PARAM), "--input", str(FASHION / "samples"), "--labels",
                        str(FASHION / "labels.txt"), "--resize", str(prep["resize"]), "--crop", str(prep["crop"]),
                        "--mean", str(prep["mean"]), "--std", str(prep["std"])], capsys)
    assert spelled["rows"] == short["rows"]
    # an option overrides the file: another std scales every input, so other scores
    other = run_json(["run", str(PARAM), "--input", str(FASHION / "samples"), "--std", "0.7"], capsys)
    assert other["rows"][0]["values"] != short["rows"][0]["values"]


def model_with(tmp_path, text: str):
    """The Fashion-MNIST model in its own folder, with `text` as its preprocess.json."""
    for name in ("fashion_cnn.pnnx.param", "fashion_cnn.pnnx.bin", "labels.txt"):
        shutil.copyfile(FASHION / name, tmp_path / name)
    (tmp_path / "preprocess.json").write_text(text)
    return tmp_path / "fashion_cnn.pnnx.param"


@pytest.mark.parametrize("text, message", [
    ("{", "cannot read it as JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ("[28]", "give a JSON object of resize, crop, mean, std, channels, labels"),
    ('{"size": 28}', 'unknown key "size" (the keys are resize, crop, mean, std, channels, labels)'),
    ('{"resize": 0}', '"resize" is 0: give a whole number of pixels, at least 1'),
    ('{"crop": 2.5}', '"crop" is 2.5: give a whole number of pixels, at least 1'),
    ('{"resize": 28, "crop": 32}', "crop=32 is larger than resize=28: the crop must fit in the resized image"),
    ('{"channels": 3}', '"channels" is 3, but the model\'s input has 1'),
    ('{"channels": "gray"}', '"channels" is "gray": give 1 (grayscale) or 3 (RGB)'),
    ('{"mean": "0.5"}', '"mean" is "0.5": give one number or a list of them, finite numbers'),
    ('{"std": [0]}', '"std" is [0]: give one number or a list of them, numbers above 0 (it divides)'),
    ('{"mean": [0.1, 0.2, 0.3]}', '"mean" has 3 numbers, the images have 1 channel(s): give one number or 1'),
    ('{"labels": "classes.txt"}', '"labels": no file {dir}/classes.txt'),
    ('{"labels": 3}', '"labels" is 3: give the class names\' file, relative to {dir}'),
])
def test_a_bad_file_is_one_line_naming_file_and_key(tmp_path, capsys, text, message):
    param = model_with(tmp_path, text)
    expected = f"{tmp_path / 'preprocess.json'}: " + message.format(dir=tmp_path)
    with pytest.raises(ConfigError) as caught:
        model_preprocess.for_graph(param, kuiper.load(param, backend="numpy"))
    assert str(caught.value) == expected
    capsys.readouterr()
    assert main(["run", str(param), "--input", str(FASHION / "samples")]) == 1
    assert capsys.readouterr().err == f"kuiper: error: {expected}\n"


def test_one_number_is_every_channels_and_a_model_without_a_file_keeps_the_defaults(tmp_path):
    rgb = model_preprocess.ModelPreprocess(tmp_path / "preprocess.json", {"channels": 3, "mean": (0.5,)}, None)
    assert rgb.applied_to(Preprocess.grayscale()).mean == (0.5, 0.5, 0.5)
    assert rgb.applied_to(Preprocess.grayscale()).std == Preprocess().std  # RGB's default, not grayscale's
    param = MODELS / "resnet18" / "resnet18.pnnx.param"
    assert model_preprocess.read(param) is None
    assert model_preprocess.for_graph(param, kuiper.load(param, backend="numpy")) == (Preprocess(), None)
