"""The command line's promise: every error is one line and status 1 (2 for a usage error, as argparse does),
--debug shows the traceback wherever it is given, and inspect allocates nothing and prints whole cells."""

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

import kuiper
from kuiper import cli, inspection
from kuiper.cli import CliError, main
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
    graph = kuiper.RuntimeGraph(cli.default_model()).build(allocate=False)
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
    y = kuiper.load(cli.default_model()).forward(x)[0]
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
    graph = RuntimeGraph(cli.default_model()).init()
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
    monkeypatch.setattr(cli, "SOURCE_MODELS", tmp_path / "models")
    installed = tmp_path / "site-packages" / "kuiper"
    (installed / "models" / "resnet18").mkdir(parents=True)
    for name in ("manifest.json", "resnet18/resnet18.pnnx.param", "resnet18/resnet18.pnnx.bin",
                 "resnet18/b1_in0.npy", "resnet18/b1_out0.npy"):
        # copies: a symlink would resolve back to the checkout, whose manifest's other cases are all there
        shutil.copy(Path(kuiper.__file__).parent.parent / "models" / name, installed / "models" / name)
    monkeypatch.setattr(cli.resources, "files", lambda package: installed if package == "kuiper" else None)
    assert cli.default_model() == installed / "models" / "resnet18" / "resnet18.pnnx.param"
    status, out, _ = run(["run", "--json"], capsys)
    assert status == 0 and json.loads(out)["reference"]["matches"] is True
    status, out, _ = run(["run", "--json", "--batch", "3"], capsys)  # b3's files are not installed: no reference
    assert status == 0 and json.loads(out)["reference"] is None
