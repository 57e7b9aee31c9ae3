"""The command line's promise: every error is one line and status 1 (2 for a usage error, as argparse does),
--debug shows the traceback wherever it is given, and inspect allocates nothing and prints whole cells."""

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

import kuiper
from kuiper.app import cli, inspection
from kuiper.app.cli import run as cli_run
from kuiper.core import shipped
from kuiper.app.cli import CliError, main
from kuiper.runtime.graph import RuntimeGraph
from kuiper.runtime.executor import NumpyExecutor

from conftest import model_cases, model_paths

ACT_ZOO = str(model_paths("act_zoo")[0])


def run(argv, capsys) -> tuple:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("argv, message", [
    (["run", "--batch", "-1"], "argument --batch: -1 is not at least 1"),
    (["run", "--batch", "0"], "argument --batch: 0 is not at least 1"),
    (["run", "--repeat", "0"], "argument --repeat: 0 is not at least 1"),
    (["run", "--topk", "0"], "argument --topk: 0 is not at least 1"),
    (["run", "--threads", "x"], "argument --threads: 'x' is not a whole number"),
    (["inspect", "--input-shape", "2,3,a,224"], "argument --input-shape: '2,3,a,224': 'a' is not a whole number"),
    (["inspect", "--input-shape", "1,3,0,224"], "argument --input-shape: '1,3,0,224': 0 is not at least 1"),
])
def test_option_values_out_of_range_are_usage_errors(argv, message, capsys):
    status, out, err = run(argv, capsys)
    assert status == 2 and not out
    assert message in err.splitlines()[-1] and "Traceback" not in err


def test_run_checks_before_it_allocates_or_writes(tmp_path, capsys):
    """A batch whose inputs alone pass the memory limit, a directory for a model, a --save that cannot be written:
    one line each; --save writes the path given, whatever its suffix."""
    status, _, err = run(["run", "--batch", "1000000000", "--memory-limit", "4G"], capsys)
    assert status == 1 and one_line(err) == ("kuiper: error: --batch 1000000000: the inputs alone take 547.6 TiB, "
                                             "over the memory limit of 4.0 GiB (--memory-limit)")
    status, _, err = run(["run", str(tmp_path)], capsys)
    assert status == 1 and one_line(err) == f"kuiper: error: {tmp_path}: a directory: give a model's .pnnx.param file"
    (tmp_path / "config.json").write_text("{}")
    status, _, err = run(["run", str(tmp_path)], capsys)
    assert status == 1 and "a language model's directory: kuiper generate or kuiper chat runs it" in one_line(err)
    missing = tmp_path / "no" / "x.npz"
    status, _, err = run(["run", "--save", str(missing)], capsys)
    assert status == 1 and one_line(err) == f"kuiper: error: --save {missing}: No such file or directory"
    status, _, _ = run(["run", "--save", str(tmp_path / "y.npy")], capsys)
    assert status == 0 and list(np.load(tmp_path / "y.npy")) == ["output0"]


def test_errors_are_one_line_and_debug_works_before_or_after_the_command(capsys):
    status, _, err = run(["run", "missing.pnnx.param"], capsys)
    assert status == 1 and one_line(err) == "kuiper: error: model file not found: missing.pnnx.param"
    for argv in (["--debug", "run", "missing.pnnx.param"], ["run", "missing.pnnx.param", "--debug"]):
        with pytest.raises(CliError, match="model file not found"):
            main(argv)


def test_an_unexpected_exception_is_one_line_too(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom\nsecond line")

    monkeypatch.setattr(kuiper, "load", broken)
    status, _, err = run(["run", ACT_ZOO], capsys)
    assert status == 1
    assert one_line(err) == ("kuiper: error: ZeroDivisionError: boom (--debug shows the rest) (unexpected: --debug "
                             "shows where it happened)")


def test_warnings_are_one_line_without_a_source_line(tmp_path, capsys):
    (_, [x], _), = model_cases("act_zoo")
    np.save(tmp_path / "x.npy", x.astype(np.float64))
    status, out, err = run(["run", ACT_ZOO, "--input", str(tmp_path / "x.npy")], capsys)
    assert status == 0 and "output 12" in out
    assert one_line(err) == ("kuiper: warning: graph input 'pnnx_input_0' (operand 0): float64 input converted to "
                             "float32")


def test_an_unreadable_input_file_is_one_line(tmp_path, capsys):
    (tmp_path / "x.npy").write_bytes(b"not an array")
    status, _, err = run(["run", ACT_ZOO, "--input", str(tmp_path / "x.npy")], capsys)
    assert status == 1 and one_line(err).startswith(f"kuiper: error: --input {tmp_path / 'x.npy'}: cannot read it (")


def test_batch_runs_at_that_batch_and_the_memory_limit_refuses_in_one_line(capsys):
    status, out, _ = run(["run", ACT_ZOO, "--batch", "1"], capsys)
    assert status == 0 and "input 1x7x5x9" in out
    status, _, err = run(["run", ACT_ZOO, "--memory-limit", "1K"], capsys)
    assert status == 1 and one_line(err).startswith("kuiper: error: ") and "over the memory limit of 1.0 KiB" in err
    status, _, err = run(["run", ACT_ZOO, "--memory-limit", "lots"], capsys)
    assert status == 1 and one_line(err).startswith("kuiper: error: memory_limit='lots' is not a size")


def test_graphviz_failing_is_one_line(tmp_path, capsys, monkeypatch):
    dot = tmp_path / "dot"
    dot.write_text("#!/bin/sh\necho 'Error: syntax error in line 1' >&2\nexit 3\n")
    dot.chmod(dot.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    status, _, err = run(["inspect", ACT_ZOO, "--graph", str(tmp_path / "g.svg")], capsys)
    assert status == 1
    assert one_line(err) == (f"kuiper: error: --graph {tmp_path / 'g.svg'}: graphviz's dot failed (status 3): "
                             f"Error: syntax error in line 1")


@pytest.fixture
def two_threads():
    """The layers' work buffers are per thread: byte counts in a test are for 2 threads, whatever the cores."""
    kuiper.set_num_threads(2)
    yield
    kuiper.set_num_threads(None)


def test_inspect_allocates_nothing_and_prints_whole_cells_when_piped(capsys, monkeypatch, two_threads):
    def prepare(self, plan, order):
        raise AssertionError("inspect allocated a plan")

    monkeypatch.setattr(NumpyExecutor, "prepare", prepare)
    # 64 images of 1024x1024: about 16 GiB for a forward, which inspect only adds up
    status, out, _ = run(["inspect", "--input-shape", "64,3,1024,1024"], capsys)
    assert status == 0
    assert "64x3x1024x1024" in out and "64x64x512x512" in out and "…" not in out  # captured: not a terminal
    graph = kuiper.RuntimeGraph(cli.default_model(), backend="numpy").build(allocate=False)
    needed = graph.planned_bytes(graph.layout_for((64, 3, 1024, 1024)))
    assert needed > 8 << 30  # more than this machine could spare, added up only
    assert f"a forward allocates {needed / 2**20:.2f} MiB (with the layers' work buffers)" in out
    status, out, err = run(["inspect", "--input-shape", "1,3,224,224", "--input-shape", "1,3,8,8"], capsys)
    assert status == 1 and one_line(err) == ("kuiper: error: --input-shape is given 2 time(s), the model has 1 "
                                             "input(s)")


def test_run_json_reports_the_forward_and_save_writes_the_outputs(tmp_path, capsys):
    status, out, err = run(["run", "--json", "--topk", "3", "--repeat", "2", "--save", str(tmp_path / "out.npz")],
                           capsys)
    assert status == 0 and not err
    report = json.loads(out)
    (_, [x], [ref]), *_ = model_cases("resnet18")
    y = kuiper.load(cli.default_model(), backend="numpy").forward(x)[0]
    assert report["model"] == str(cli.default_model()) and report["backend"] == "numpy"
    assert report["inputs"] == [[1, 3, 224, 224]] and report["repeat"] == 2 and report["forward_ms"] > 0
    [summary] = report["outputs"]
    assert summary["shape"] == [1, 1000] and summary["dtype"] == "float32"
    for key, value in (("mean", y.mean()), ("std", y.std()), ("min", y.min()), ("max", y.max())):
        assert summary[key] == pytest.approx(float(value), abs=1e-4), key
    assert summary["topk"]["indices"] == [list(np.argsort(y[0])[::-1][:3])]
    assert summary["topk"]["values"][0] == pytest.approx(np.sort(y[0])[::-1][:3].tolist(), abs=1e-4)
    assert report["reference"]["matches"] is True
    assert report["reference"]["max_abs_diff"] == pytest.approx(float(np.abs(y - ref).max()), abs=1e-4)
    saved = np.load(tmp_path / "out.npz")
    assert saved.files == ["output0"] and np.allclose(saved["output0"], y, atol=1e-4)


def test_run_json_without_a_reference_and_its_errors_stay_one_line(capsys):
    status, out, _ = run(["run", ACT_ZOO, "--json", "--batch", "5"], capsys)  # no case saved at batch 5
    report = json.loads(out)
    assert status == 0 and report["reference"] is None and report["inputs"] == [[5, 7, 5, 9]]
    status, out, err = run(["run", "missing.pnnx.param", "--json"], capsys)
    assert status == 1 and not out and one_line(err) == "kuiper: error: model file not found: missing.pnnx.param"


def test_inspect_json_gives_the_rows_totals_memory_and_fusion(capsys):
    status, out, _ = run(["inspect", "--json"], capsys)
    assert status == 0
    report = json.loads(out)
    graph = RuntimeGraph(cli.default_model(), backend="numpy").init()
    graph.build(allocate=False)
    plan = graph.layout_for((1, 3, 224, 224))
    rows = inspection.operator_rows(graph, plan)
    assert [(r["name"], r["type"], r["params"], r["macs"]) for r in report["rows"]] == [
        (r.name, r.type, r.params, r.macs) for r in rows]
    assert report["rows"][1]["inputs"] == [[1, 3, 224, 224]]
    assert report["totals"] == {"params": sum(r.params for r in rows), "macs": sum(r.macs for r in rows)}
    assert report["memory"]["planned_bytes"] == inspection.activation_memory(graph, plan)["planned"]
    fused, in_place = inspection.fusion_summary(graph)
    assert [f["name"] for f in report["fusion"]["fused"]] == [op.name for op in fused]
    assert report["fusion"]["fused"][0]["absorbed"][1]["type"] == "nn.ReLU"
    assert len(report["fusion"]["in_place"]) == len(in_place)


def test_the_default_model_is_the_package_data_without_a_source_checkout(tmp_path, capsys, monkeypatch):
    # a plain install: no models/ beside the package, only what setup.py maps into kuiper/models
    installed = tmp_path / "site-packages" / "kuiper"
    (installed / "models" / "resnet18").mkdir(parents=True)
    for name in ("manifest.json", "resnet18/resnet18.pnnx.param", "resnet18/resnet18.pnnx.bin",
                 "resnet18/b1_in0.npy", "resnet18/b1_out0.npy"):
        # copies: a symlink would resolve back to the checkout, whose manifest's other cases are all there
        shutil.copy(Path(kuiper.__file__).parent.parent / "models" / name, installed / "models" / name)
    monkeypatch.setattr(shipped, "PACKAGE", installed)
    assert cli.default_model() == installed / "models" / "resnet18" / "resnet18.pnnx.param"
    status, out, _ = run(["run", "--json"], capsys)
    assert status == 0 and json.loads(out)["reference"]["matches"] is True
    status, out, _ = run(["run", "--json", "--batch", "3"], capsys)  # b3's files are not installed: no reference
    assert status == 0 and json.loads(out)["reference"] is None


# ---- images, labels, several inputs, folders -----------------------------------------------------------
from PIL import Image  # noqa: E402  (the dev extra has Pillow; the image tests below need it)

from kuiper.app import labels  # noqa: E402

TWO = model_paths("expr_two_inputs")[0]


def picture(path, seed, mode="RGB", size=(300, 260)):
    """A random picture of the given mode, saved by suffix."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).convert(mode).save(path)
    return path


def test_an_image_run_names_the_classes_and_says_the_weights_are_random(tmp_path, capsys):
    image = picture(tmp_path / "cat.png", 1)
    status, out, err = run(["run", "--input", str(image), "--json", "--topk", "3"], capsys)
    assert status == 0 and not err
    report = json.loads(out)
    topk = report["outputs"][0]["topk"]
    names = labels.imagenet_classes()
    assert topk["labels"] == [[names[i] for i in topk["indices"][0]]]
    assert report["random_weights"] is True and report["reference"] is None
    status, out, _ = run(["run", "--input", str(image), "--topk", "3"], capsys)
    best = topk["indices"][0][0]
    assert status == 0 and f"item 0 top-3: {best} {names[best]} (" in out
    assert cli_run.RANDOM_WEIGHTS_NOTE in out.replace("\n", "")
    # the same model on its saved array input: no image, so no note
    status, out, _ = run(["run"], capsys)
    assert status == 0 and "random" not in out and "matches the saved PyTorch output" in out


def test_input_is_repeatable_one_per_model_input(tmp_path, capsys):
    (_, inputs, references), = model_cases("expr_two_inputs")
    files = [str(tmp_path / f"in{k}.npy") for k in range(2)]
    for path, x in zip(files, inputs):
        np.save(path, x)
    status, out, _ = run(["run", str(TWO), "--input", files[0], "--input", files[1], "--save",
                          str(tmp_path / "out.npz")], capsys)
    assert status == 0 and "input 2x5x7x9, 2x1x7x9" in out
    saved = np.load(tmp_path / "out.npz")
    for k, ref in enumerate(references):
        assert np.allclose(saved[f"output{k}"], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    # the saved case's own files: checked against PyTorch's outputs for them
    manifest_dir = TWO.parent.parent
    case = json.loads((manifest_dir / "manifest.json").read_text())["models"]["expr_two_inputs"]["cases"][0]
    status, out, _ = run(["run", str(TWO), *[a for p in case["inputs"] for a in ("--input", str(manifest_dir / p))]],
                         capsys)
    assert status == 0 and "matches the saved PyTorch output" in out
    status, _, err = run(["run", str(TWO), "--input", files[0]], capsys)
    assert status == 1 and one_line(err) == "kuiper: error: --input is given 1 time(s), the model has 2 input(s)"


def test_run_reads_the_record_kuiper_export_writes(tmp_path, capsys):
    """NAME.export.json beside NAME.pnnx.param names the sample input and PyTorch's output (written here by
    hand from a committed model, so that no torch is needed)."""
    param, bin_ = model_paths("act_zoo")
    shutil.copy(param, tmp_path / "act.pnnx.param")
    shutil.copy(bin_, tmp_path / "act.pnnx.bin")
    (_, [x], outputs), = model_cases("act_zoo")
    np.save(tmp_path / "act_in0.npy", x)
    for k, out in enumerate(outputs):
        np.save(tmp_path / f"act_out{k}.npy", out)
    record = {"inputs": [{"file": "act_in0.npy", "shape": list(x.shape)}], "random_weights": False,
              "outputs": [{"file": f"act_out{k}.npy", "shape": list(out.shape)} for k, out in enumerate(outputs)]}
    (tmp_path / "act.export.json").write_text(json.dumps(record))
    status, out, _ = run(["run", str(tmp_path / "act.pnnx.param"), "--json"], capsys)
    report = json.loads(out)
    assert status == 0 and report["reference"]["matches"] is True and report["inputs"] == [list(x.shape)]
    assert report["random_weights"] is False
    np.save(tmp_path / "act_out3.npy", outputs[3] + 1)  # PyTorch said otherwise: a failed check, status 1
    status, out, err = run(["run", str(tmp_path / "act.pnnx.param")], capsys)
    assert status == 1 and "DOES NOT match the saved PyTorch output" in out
    assert one_line(err) == "kuiper: error: output differs from the saved PyTorch reference"
    (tmp_path / "act.export.json").write_text("{not json")
    status, _, err = run(["run", str(tmp_path / "act.pnnx.param")], capsys)
    assert status == 1 and one_line(err).startswith(f"kuiper: error: {tmp_path / 'act.export.json'}: not a record "
                                                    f"kuiper export wrote (JSONDecodeError: ")


@pytest.fixture
def folder(tmp_path):
    """Five images of three kinds (one grayscale, one RGBA), an unreadable one and a file that is no image."""
    images = tmp_path / "images"
    images.mkdir()
    picture(images / "b.png", 2)
    picture(images / "a.jpg", 3)
    picture(images / "c.PNG", 4, mode="L")
    picture(images / "d.png", 5, mode="RGBA", size=(224, 400))
    picture(images / "e.bmp", 6, size=(256, 256))
    (images / "broken.png").write_bytes(b"\x89PNG cut short")
    (images / "readme.txt").write_text("not an image")
    return images


def test_a_folder_runs_in_batches_and_writes_csv_and_jsonl(folder, tmp_path, capsys):
    names = labels.imagenet_classes()
    status, out, err = run(["run", "--input", str(folder), "--batch", "2", "--topk", "4",
                            "--out", str(tmp_path / "rows.csv")], capsys)
    assert status == 0
    assert one_line(err).startswith(f"kuiper: warning: skipped {folder / 'broken.png'}: cannot read it as an image")
    assert "5 image(s)" in out and "1 skipped" in out and cli_run.RANDOM_WEIGHTS_NOTE in out.replace("\n", "")
    import csv

    with open(tmp_path / "rows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [Path(r["path"]).name for r in rows] == ["a.jpg", "b.png", "c.PNG", "d.png", "e.bmp"]
    status, out, _ = run(["run", "--input", str(folder), "--out", str(tmp_path / "rows.jsonl"), "--topk", "4"],
                         capsys)
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [line["path"] for line in lines] == [r["path"] for r in rows]
    for row, line in zip(rows, lines):
        # each row is what a run on that image alone gives
        status, out, _ = run(["run", "--input", row["path"], "--json", "--topk", "4"], capsys)
        alone = json.loads(out)["outputs"][0]["topk"]
        assert row["topk"] == " ".join(map(str, alone["indices"][0])) == " ".join(map(str, line["indices"]))
        assert int(row["index"]) == alone["indices"][0][0] and row["label"] == names[alone["indices"][0][0]]
        assert float(row["score"]) == pytest.approx(alone["values"][0][0], rel=1e-4, abs=1e-4)
        assert line["labels"] == alone["labels"][0]
        assert line["values"] == pytest.approx(alone["values"][0], rel=1e-4, abs=1e-4)


def test_a_folder_without_out_prints_a_line_per_image_and_json_gives_the_rows(folder, capsys):
    status, out, _ = run(["run", "--input", str(folder), "--topk", "2"], capsys)
    assert status == 0 and len([line for line in out.splitlines() if line.startswith(str(folder))]) == 5
    status, out, err = run(["run", "--input", str(folder), "--json"], capsys)
    report = json.loads(out)
    assert report["images"] == 6 and report["skipped"] == [str(folder / "broken.png")] and report["batch"] == 8
    assert len(report["rows"]) == 5 and report["rows"][0]["labels"][0] in labels.imagenet_classes()


def test_labels_from_a_file(tmp_path, capsys):
    model = str(model_paths("reshape_batch")[0])  # its second output: 5 classes per item
    (tmp_path / "names.txt").write_text("# five names\nzero\none\ntwo\nthree\nfour\n")
    status, out, _ = run(["run", model, "--labels", str(tmp_path / "names.txt"), "--json"], capsys)
    topk = json.loads(out)["outputs"][1]["topk"]
    assert status == 0 and topk["labels"][0] == [["zero", "one", "two", "three", "four"][i]
                                                 for i in topk["indices"][0]]
    (tmp_path / "names.txt").write_text("zero\none\n")
    status, _, err = run(["run", model, "--labels", str(tmp_path / "names.txt")], capsys)
    assert status == 1 and one_line(err) == (f"kuiper: error: --labels {tmp_path / 'names.txt'}: 2 class names, "
                                             f"but no output has 2 classes (classes per output: 5)")


@pytest.mark.parametrize("options, message", [
    (["--resize", "x"], "--resize 'x': give a whole number of pixels, at least 1"),
    (["--crop", "0"], "--crop '0': give a whole number of pixels, at least 1"),
    (["--mean", "0.5,0.5"], "--mean '0.5,0.5': give three numbers R,G,B (or one for all three)"),
    (["--std", "1,0,1"], "--std '1,0,1': every channel's std must be above 0 (it divides)"),
    (["--crop", "300"], "--crop 300 is larger than --resize 256 (the default): the crop must fit in the resized image"),
    (["--out", "rows.txt"], "--out rows.txt: unknown file type '.txt' (use .csv or .jsonl)"),
    (["--save", "x.npz", "--out", "rows.csv"], "--save takes one forward: run a single image without --out for it"),
])
def test_image_options_are_checked_in_one_line(options, message, tmp_path, capsys):
    status, out, err = run(["run", "--input", str(picture(tmp_path / "p.png", 0)), *options], capsys)
    assert status == 1 and not out and one_line(err) == f"kuiper: error: {message}"


def test_folder_and_preparation_errors_are_one_line(folder, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    status, _, err = run(["run", "--input", str(empty)], capsys)
    assert status == 1 and one_line(err) == (f"kuiper: error: {empty}: no images in this folder (looked for .jpg "
                                             f".jpeg .png .bmp .gif .webp .tif .tiff)")
    status, _, err = run(["run", str(TWO), "--input", str(folder)], capsys)
    assert status == 1 and one_line(err).startswith("kuiper: error: a folder of images (or --out) needs a model with "
                                                    "one input and one --input; the model has 2 input(s)")
    (empty / "x.png").write_bytes(b"nothing")
    status, _, err = run(["run", "--input", str(empty)], capsys)
    assert status == 1 and err.splitlines()[-1] == "kuiper: error: none of the 1 image(s) could be read"
    status, _, err = run(["run", "--resize", "300"], capsys)
    assert status == 1 and one_line(err) == ("kuiper: error: --resize prepare images: give --input IMAGE or a folder "
                                             "of them")
    unet = str(model_paths("unet_tiny")[0])  # its first output (N, 4, H, W) is no row of classes per image
    status, _, err = run(["run", unet, "--input", str(folder)], capsys)
    assert status == 1 and err.splitlines()[-1] == ("kuiper: error: the model's first output has shape (5, 4, 224, "
                                                    "224), not (images, classes): a folder of images gives one row "
                                                    "of classes per image")


def test_a_fixed_input_side_scales_the_preparation():
    """A model whose .param fixes 299 x 299 (inception_v3) gets ImageNet's preparation scaled: 342, crop 299."""
    from types import SimpleNamespace

    op = SimpleNamespace(output_operand=SimpleNamespace(shape=(1, 3, 299, 299)))
    args = SimpleNamespace(resize=None, crop=None, mean=None, std="0.5")
    pre = cli_run._preparation(op, args)
    assert (pre.resize, pre.crop, pre.std) == (342, 299, (0.5, 0.5, 0.5))


def test_export_without_torch_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed: importing it raises ImportError
    status, out, err = run(["export", "torchvision:resnet18"], capsys)
    assert status == 1 and not out
    assert one_line(err).startswith("kuiper: error: exporting needs torch and pnnx (torch")
    assert one_line(err).endswith('not installed): pip install "kuiper[export]"')


def test_importing_kuiper_does_not_import_torch():
    import subprocess

    code = "import sys, kuiper, kuiper.app.cli, kuiper.app.export; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
