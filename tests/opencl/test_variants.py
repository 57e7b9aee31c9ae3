"""Kernel variants chosen by shape (kuiper/opencl/tuning.py): by rule when a plan is made, by measurement with
a tuning cache that a second graph and a second process reuse, and a cache file that is broken or unwritable
costing a warning, never a crash. Every cache lives in tmp_path; no test asserts a time."""

import json
import os
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

import kuiper
from conftest import ROOT
from kuiper import BackendError, KuiperWarning
from kuiper.opencl.batchnorm2d import rule
from kuiper.opencl import tuning as variants
from kuiper.opencl.tuning import TuningCache, cache_key, default_cache_path
from kuiper.opencl.devices import spec_of

SHAPE = (1, 8, 3, 3)


@pytest.fixture
def bn_model(tmp_path):
    """Input -> BatchNorm2d -> Output, recorded at SHAPE."""
    c, dims = SHAPE[1], ",".join(map(str, SHAPE))
    rng = np.random.default_rng(0)
    arrays = {"running_mean": rng.standard_normal(c), "running_var": rng.uniform(0.5, 2.0, c),
              "weight": rng.standard_normal(c), "bias": rng.standard_normal(c)}
    weights = " ".join(f"@{name}=({c})f32" for name in arrays)
    param = tmp_path / "bn.pnnx.param"
    param.write_text(f"7767517\n3 2\npnnx.Input in0 0 1 x #x=({dims})f32\n"
                     f"nn.BatchNorm2d bn 1 1 x y affine=True eps=1e-05 num_features={c} {weights} "
                     f"#x=({dims})f32 #y=({dims})f32\npnnx.Output out0 1 0 y\n")
    with zipfile.ZipFile(tmp_path / "bn.pnnx.bin", "w") as archive:
        for name, array in arrays.items():
            archive.writestr(f"bn.{name}", array.astype(np.float32).tobytes())
    return param


def load(param, rt, **options):
    return kuiper.load(param, backend="opencl", device=spec_of(rt.device), **options)


def check_outputs(graph, param, shape):
    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    on_numpy = kuiper.load(param, backend="numpy")
    np.testing.assert_allclose(graph.forward(x)[0], on_numpy.forward(x)[0], rtol=1e-6, atol=1e-6)


def test_by_rule_each_new_shape_gets_its_variant_when_its_plan_is_made(cl_runtime, bn_model):
    graph = load(bn_model, cl_runtime)
    assert graph.tuning == "rule"
    layer = graph.operators[1].layer
    assert layer.variants.chosen == {(SHAPE,): rule(SHAPE, cl_runtime.is_cpu)}  # at build, for the recorded shape
    for shape in [(2, 8, 1, 1), (1, 8, 40, 40)]:
        check_outputs(graph, bn_model, shape)
        assert graph.last_variants == {"bn": rule(shape, cl_runtime.is_cpu)}
        assert layer.variants.chosen[(shape,)] == graph.last_variants["bn"]
    assert len(layer.variants.chosen) == 3


def test_measuring_fills_the_cache_and_a_second_graph_reuses_it(cl_runtime, bn_model, tmp_path, monkeypatch):
    path = tmp_path / "cache" / "tuning.json"
    monkeypatch.setenv("KUIPER_TUNING_CACHE", str(path))
    first = load(bn_model, cl_runtime, tuning="measure")
    (key, entry), = json.loads(path.read_text())["entries"].items()
    device = cl_runtime.device
    assert key.startswith(f"{device.name.strip()} | {device.driver_version} | ")
    assert key.endswith("| nn.BatchNorm2d affine=True eps=1e-05 num_features=8 | 1x8x3x3")
    assert sorted(entry["seconds"]) == ["channel", "plane", "tiled"]
    assert entry["variant"] == min(entry["seconds"], key=entry["seconds"].get)
    assert first.plans[((SHAPE, np.dtype(np.float32)),)].variants == {"bn": entry["variant"]}

    def no_measuring(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(variants, "measure", no_measuring)
    monkeypatch.setenv("KUIPER_TUNING", "measure")  # the environment variable asks for measuring too
    second = load(bn_model, cl_runtime)
    assert second.tuning == "measure" and second.operators[1].layer.variants.chosen == {(SHAPE,): entry["variant"]}
    check_outputs(second, bn_model, SHAPE)


def test_a_second_process_does_not_measure_again(cl_runtime, bn_model, tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("KUIPER_TUNING_CACHE", str(path))
    load(bn_model, cl_runtime, tuning="measure")
    written = path.read_text(), path.stat().st_mtime_ns
    command = [sys.executable, "-m", "kuiper", "run", str(bn_model), "--backend", "opencl", "--tune",
               "--device", cl_runtime.device.name]
    run = subprocess.run(command, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (path.read_text(), path.stat().st_mtime_ns) == written  # nothing measured, so nothing stored


def test_an_entry_holds_for_its_device_sources_and_candidates(cl_runtime, bn_model, tmp_path, monkeypatch):
    layer = load(bn_model, cl_runtime).operators[1].layer
    key = cache_key(layer, [SHAPE])
    cache = TuningCache(tmp_path / "tuning.json")
    cache.store(key, "channel", {"plane": 3e-6, "channel": 1e-6, "tiled": 2e-6})
    assert TuningCache(cache.path).winner(key, ["plane", "channel", "tiled"]) == "channel"
    assert cache.winner(key, ["plane", "channel"]) is None  # the candidates changed: measure them again
    assert cache.winner(cache_key(layer, [(2, 8, 3, 3)]), ["plane", "channel", "tiled"]) is None
    monkeypatch.setattr(cl_runtime, "source_hash", lambda file: "edited")
    assert cache_key(layer, [SHAPE]) != key  # an edited kernel file invalidates its measurements


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"format": 99, "entries": {}}', "\xff\xfe"])
def test_a_broken_cache_file_warns_and_is_rewritten(tmp_path, text):
    path = tmp_path / "tuning.json"
    path.write_bytes(text.encode("latin-1"))
    cache = TuningCache(path)
    with pytest.warns(KuiperWarning, match="unreadable .* ignored"):
        assert cache.winner("key", ["a", "b"]) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once is enough
        cache.store("key", "a", {"a": 1e-6, "b": 2e-6})
    assert TuningCache(path).winner("key", ["a", "b"]) == "a"


def test_a_malformed_entry_counts_as_missing(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"format": 1, "entries": {"k1": [1], "k2": {"variant": "a"}, "k3": {"seconds": 5}}}))
    assert [TuningCache(path).winner(key, ["a"]) for key in ("k1", "k2", "k3")] == [None, None, None]


def test_an_unusable_cache_path_warns_and_the_graph_still_runs(cl_runtime, bn_model, tmp_path, monkeypatch):
    monkeypatch.setenv("KUIPER_TUNING_CACHE", str(tmp_path))  # a directory: neither readable nor writable as a file
    with pytest.warns(KuiperWarning, match="tuning cache"):
        graph = load(bn_model, cl_runtime, tuning="measure")
    check_outputs(graph, bn_model, SHAPE)
    blocked = TuningCache(bn_model / "tuning.json")  # its folder would be a file
    with pytest.warns(KuiperWarning, match="unreadable"), pytest.warns(KuiperWarning, match="cannot be written"):
        blocked.store("key", "a", {"a": 1e-6, "b": 2e-6})
    assert blocked.winner("key", ["a", "b"]) == "a"


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.delenv("KUIPER_TUNING_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "kuiper" / "tuning.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / ".cache" / "kuiper" / "tuning.json"
    monkeypatch.setenv("KUIPER_TUNING_CACHE", str(tmp_path / "mine.json"))
    assert default_cache_path() == tmp_path / "mine.json"


def test_unknown_tuning_is_a_backend_error(bn_model, monkeypatch):
    with pytest.raises(BackendError, match="unknown tuning 'fast' .*available: rule, measure"):
        kuiper.RuntimeGraph(bn_model, tuning="fast", backend="numpy")
    monkeypatch.setenv("KUIPER_TUNING", "fastest")
    with pytest.raises(BackendError, match="'fastest' \\(from KUIPER_TUNING\\)"):
        kuiper.RuntimeGraph(bn_model, backend="numpy")


def test_the_profile_shows_each_operators_variant(cl_runtime, bn_model, capsys):
    from kuiper.app import cli

    assert cli.main(["run", str(bn_model), "--backend", "opencl", "--device", cl_runtime.device.name,
                     "--profile"]) == 0
    table = capsys.readouterr().out.split("time per operator")[1].split("time per type")[0]
    assert "variant" in table and rule(SHAPE, cl_runtime.is_cpu) in table
    graph = kuiper.load(bn_model, backend="numpy")
    graph.forward(np.zeros(SHAPE, np.float32), profile=True)
    assert graph.last_variants == {}  # numpy has no kernels to choose from
