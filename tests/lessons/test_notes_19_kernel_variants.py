"""The claims of lesson 19: every BatchNorm and GEMM variant against independent references, the rule, choices
made with the plan and only looked up in forward, measuring into a tuning cache that a second graph reuses, and
a broken cache file. Every cache lives in tmp_path; no time is asserted."""

import json

import numpy as np
import pytest

import kuiper
from conftest import assert_every_variant_matches_numpy
from kuiper import KuiperWarning
from kuiper.opencl.batchnorm2d import TILE, rule
from kuiper.opencl import tuning as variants
from kuiper.runtime.backends import make_layer
from lesson_tools import MODELS, check_shell_commands
from kuiper.opencl.devices import spec_of

RNG = np.random.default_rng(18)
CONV_ZOO = MODELS / "conv_zoo" / "conv_zoo.pnnx.param"
RECORDED = (2, 3, 15, 17)  # conv_zoo's input, and so its BatchNorm's


def batchnorm(shape):
    """An OpenCL BatchNorm2d layer on random statistics, and its unfolded formula in float64 as a function."""
    c = shape[1]
    stats = {"running_mean": RNG.standard_normal(c), "running_var": RNG.uniform(0.5, 2.0, c),
             "weight": RNG.standard_normal(c), "bias": RNG.standard_normal(c)}
    stats = {k: v.astype(np.float32) for k, v in stats.items()}
    layer = make_layer("nn.BatchNorm2d", backend="opencl", params=dict(num_features=c, eps=1e-5, affine=True),
                       attrs=stats, input_shapes=[shape])

    def reference(x):
        per_channel = {k: v.astype(np.float64).reshape(-1, 1, 1) for k, v in stats.items()}
        normalized = (x - per_channel["running_mean"]) / np.sqrt(per_channel["running_var"] + 1e-5)
        return normalized * per_channel["weight"] + per_channel["bias"]

    return layer, reference


@pytest.mark.parametrize("shape", [(1, 3, 1, 1), (2, 9, 2, 3), (1, 2, 45, 29), (3, 4, 7, 5)])
def test_every_batchnorm_variant_against_the_formula(cl_runtime, shape):
    assert 45 * 29 > TILE  # one shape has a plane of two tiles, the second one short
    layer, reference = batchnorm(shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    layer.build_opencl(cl_runtime)
    for name in layer.variants.candidates((shape,)):
        (got,) = layer.run_opencl(cl_runtime, x, variant=name)
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, layer.run_numpy(x)[0])  # the same two roundings as numpy


def test_every_gemm_variant_of_a_convolution(cl_runtime):
    conv = make_layer("nn.Conv2d", input_shapes=[(2, 4, 9, 5)], params=dict(
        in_channels=4, out_channels=6, kernel_size=[3, 3], padding=[1, 1], stride=[2, 1], bias=True),
        attrs=dict(weight=RNG.standard_normal((6, 4, 3, 3)).astype(np.float32),
                   bias=RNG.standard_normal(6).astype(np.float32)))
    x = RNG.standard_normal((2, 4, 9, 5), dtype=np.float32)
    names = assert_every_variant_matches_numpy(conv, cl_runtime, x)
    assert "cpu 6x32" not in names and {"cpu 6x16", "cpu 6x1"} <= set(names)  # n = 5 x 5 output pixels


def test_the_rules_table():
    cpu = {(1, 512, 7, 7): "channel", (1, 64, 56, 56): "tiled", (1, 16, 224, 224): "tiled", (1, 3, 15, 17): "tiled"}
    gpu = {(1, 512, 7, 7): "plane", (1, 2048, 1, 1): "plane", (8, 64, 3, 3): "plane", (1, 16, 224, 224): "plane"}
    assert {shape: rule(shape, is_cpu=True) for shape in cpu} == cpu
    assert {shape: rule(shape, is_cpu=False) for shape in gpu} == gpu


def test_choices_are_made_with_the_plan_and_only_looked_up_in_forward(cl_runtime):
    zoo = kuiper.load(CONV_ZOO, backend="opencl", device=spec_of(cl_runtime.device))
    plan = zoo.plans[((RECORDED, np.dtype(np.float32)),)]
    with_variants = [op for op in zoo.order if op.layer is not None and op.layer.variants is not None]
    assert plan.variants.keys() == {op.name for op in with_variants} and len(with_variants) == 8

    def no_deciding(shapes):
        raise AssertionError("a rule ran in forward")

    for op in with_variants:
        op.layer.variants.rule = no_deciding
    x = RNG.standard_normal(RECORDED).astype(np.float32)
    (y,) = zoo.forward(x)
    np.testing.assert_allclose(y, kuiper.load(CONV_ZOO, backend="numpy").forward(x)[0], rtol=1e-4, atol=1e-4)
    for op in with_variants:
        shapes = tuple(plan.shapes[operand.name] for operand in op.input_operands)
        assert zoo.last_variants[op.name] == op.layer.variants.chosen[shapes]


def test_a_measured_winner_is_cached_and_reused(cl_runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("KUIPER_TUNING_CACHE", str(tmp_path / "tuning.json"))
    layer, _ = batchnorm((1, 6, 5, 4))
    layer.build_opencl(cl_runtime)
    name = variants.choose(layer, [(1, 6, 5, 4)], "measure")
    entries = json.loads((tmp_path / "tuning.json").read_text())["entries"]
    (entry,) = entries.values()
    # the fastest; stored to 4 digits, two variants can tie
    assert entry["variant"] == name and entry["seconds"][name] == min(entry["seconds"].values())
    assert set(entry["seconds"]) == {"plane", "channel", "tiled"}

    def no_measuring(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(variants, "measure", no_measuring)
    layer.build_opencl(cl_runtime)  # a fresh choice, as in a second graph
    assert variants.choose(layer, [(1, 6, 5, 4)], "measure") == name
    assert layer.variants.chosen == {((1, 6, 5, 4),): name}


def test_a_broken_cache_costs_a_warning(cl_runtime, tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text("{ half a file")
    layer, _ = batchnorm((1, 6, 5, 4))
    layer.build_opencl(cl_runtime)
    with pytest.warns(KuiperWarning, match="unreadable"):
        variants.choose(layer, [(1, 6, 5, 4)], "measure", variants.TuningCache(path))
    assert len(json.loads(path.read_text())["entries"]) == 1  # rewritten


def test_the_commands_in_the_notes(capsys, cl_runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("KUIPER_TUNING_CACHE", str(tmp_path / "tuning.json"))
    outputs = check_shell_commands(19, capsys)
    for command, output in outputs.items():
        table = output.split("time per operator")[1].split("time per type")[0]
        assert "variant" in table and "bn_add" in table, command
    entries = json.loads((tmp_path / "tuning.json").read_text())["entries"]
    # a fused operator (a convolution and its activation) is keyed by its type, the main layer's first
    assert {key.split(" | ")[4].split()[0].split("+")[0] for key in entries} == {"nn.BatchNorm2d", "nn.Conv2d"}
