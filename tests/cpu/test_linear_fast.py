"""The fast nn.Linear (kuiper/cpu/linear.py), on 1 to 3 threads, against the reference layer
(kuiper/layers/linear.py, checked against a per-feature sum in tests/layers/test_linear.py)."""

import numpy as np
import pytest

from conftest import assert_every_path_matches_reference

from kuiper.cpu import threads

RNG = np.random.default_rng(31)


@pytest.fixture(autouse=True)
def splits(monkeypatch):
    """Every split of the GEMM over kuiper's threads worth making, however little work it is."""
    monkeypatch.setattr(threads, "MIN_MACS", 1)


# (in_features, out_features, input shape): ranks 1 to 4; many output features split the GEMM's columns over
# the threads, few its rows
@pytest.mark.parametrize("features, shape", [
    ((7, 5), (7,)), ((7, 5), (1, 7)), ((7, 5), (3, 7)), ((7, 5), (3, 5, 7)), ((7, 5), (2, 3, 1, 7)),
    ((33, 300), (40, 33)), ((17, 3), (130, 17)), ((64, 1000), (1, 64)),
], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_fast_matches_reference(features, shape, bias):
    n_in, n_out = features
    attrs = {"weight": RNG.standard_normal((n_out, n_in)).astype(np.float32)}
    if bias:
        attrs["bias"] = RNG.standard_normal(n_out).astype(np.float32)
    x = RNG.standard_normal(shape).astype(np.float32)
    params = dict(in_features=n_in, out_features=n_out, bias=bias)
    assert assert_every_path_matches_reference("nn.Linear", x, params=params, attrs=attrs) == ["forward_numpy"]
