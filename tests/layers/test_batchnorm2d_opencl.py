"""nn.BatchNorm2d on OpenCL (cl/batchnorm.cl) against its numpy forward: every variant on every shape, odd
shapes included (planes of one pixel, planes past a tile with a ragged last tile, more channels than pixels),
not only the variant the rule picks; and the rule itself."""

import numpy as np
import pytest

from conftest import assert_every_variant_matches_numpy
from kuiper.core.errors import BackendError
from kuiper.opencl.batchnorm2d import TILE, rule
from test_batchnorm2d import make_bn, statistics

RNG = np.random.default_rng(13)
SHAPES = [(1, 5, 7, 5), (3, 5, 1, 1), (2, 5, 9, 11), (2, 5, 33, 31), (1, 5, 1, 2), (1, 5, 37, 41)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_every_variant_matches_numpy_on_every_shape(cl_runtime, shape, affine):
    assert 37 * 41 > TILE  # the last shape splits into two tiles, the second one short
    layer = make_bn(statistics(RNG, 5, affine), eps=1e-3, affine=affine, input_shape=shape)
    x = (3.0 * RNG.standard_normal(shape)).astype(np.float32)
    assert_every_variant_matches_numpy(layer, cl_runtime, x, rtol=1e-6)  # numpy's two roundings


def test_the_rule_picks_by_plane_size_and_device():
    assert rule((1, 512, 7, 7), is_cpu=True) == rule((8, 2048, 1, 1), is_cpu=True) == "channel"
    assert rule((8, 2048, 1, 1), is_cpu=False) == "plane"
    assert rule((1, 16, 224, 224), is_cpu=True) == rule((1, 64, 56, 56), is_cpu=True) == "tiled"
    assert rule((1, 512, 7, 7), is_cpu=False) == rule((1, 16, 224, 224), is_cpu=False) == "plane"


def test_a_layer_alone_runs_the_rules_variant_and_rejects_unknown_ones(cl_runtime):
    layer = make_bn(statistics(RNG, 5, True), input_shape=(1, 5, 2, 2), backend="opencl")
    x = RNG.standard_normal((1, 5, 2, 2)).astype(np.float32)
    layer.run_opencl(cl_runtime, x)
    assert layer.variants.chosen == {((1, 5, 2, 2),): rule((1, 5, 2, 2), cl_runtime.is_cpu)}
    with pytest.raises(BackendError, match="variant 'fast' cannot run .*candidates: plane, channel, tiled"):
        layer.run_opencl(cl_runtime, x, variant="fast")
