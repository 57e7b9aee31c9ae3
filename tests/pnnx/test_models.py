"""Every committed model (models/manifest.json) read by the PNNX reader and checked against its own
counts line, its `@` declarations and the weights PyTorch saved next to it."""

import numpy as np
import pytest

from conftest import MODELS, load_manifest, model_names, model_paths  # tests/conftest.py

from kuiper.pnnx import load

HAVE_MANIFEST = (MODELS / "manifest.json").exists()
NAMES = model_names() if HAVE_MANIFEST else []


def _require_manifest():
    if not HAVE_MANIFEST:
        pytest.skip("models/manifest.json does not exist yet (tools/export_models.py writes it)")


@pytest.fixture(scope="module", params=NAMES or [None])
def model(request):
    """(name, entry in the manifest, graph) for each model, loaded once."""
    _require_manifest()
    name = request.param
    param, bin_path = model_paths(name)
    return name, load_manifest()["models"][name], load(param, bin_path)


def test_manifest_lists_models():
    _require_manifest()
    assert NAMES, "the manifest lists no models"


def test_counts_line_matches(model):
    name, _, graph = model
    with open(graph.param_path) as f:
        f.readline()
        n_operators, n_operands = map(int, f.readline().split())
    assert (len(graph.operators), len(graph.operands)) == (n_operators, n_operands)


def test_operator_types_match_manifest(model):
    _, entry, graph = model
    if "operator_types" in entry:
        assert sorted({op.type for op in graph.operators}) == sorted(set(entry["operator_types"]))


def test_attributes_have_their_declared_shape_and_type(model):
    _, _, graph = model
    for op in graph.operators:
        for key, attr in op.attrs.items():
            where = f"{op.name}.{key}"
            assert attr.data.shape == attr.shape, where
            assert not attr.data.flags.writeable, where
            values = attr.numpy()
            assert values.shape == attr.shape, where
            expected = {"bf16": np.float32, "c32": np.complex64}.get(attr.dtype)
            if expected is not None:
                assert values.dtype == expected, where
            else:
                assert values is attr.data, where


def test_weights_equal_pytorch_values(model):
    name, entry, graph = model
    if "weights" not in entry:
        pytest.skip(f"{name} has no weights.npz")
    attrs = {f"{op.name}.{key}": attr for op in graph.operators for key, attr in op.attrs.items()}
    with np.load(MODELS / entry["weights"]) as weights:
        assert weights.files, "weights.npz is empty"
        for key in weights.files:
            assert key in attrs, f"{key} is in weights.npz but no operator declares it"
            got, want = attrs[key].numpy(), weights[key]
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"), key


def test_every_operand_has_a_producer(model):
    _, _, graph = model
    names = {op.name: op for op in graph.operators}
    for operand in graph.operands.values():
        assert operand.producer in names, operand.name
        assert operand.name in names[operand.producer].outputs
        for consumer in operand.consumers:
            assert operand.name in names[consumer].inputs
