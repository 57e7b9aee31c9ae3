"""nn.BatchNorm2d on OpenCL (cl/batchnorm.cl) against its numpy forward: every variant on every shape, odd
shapes included (planes of one pixel, planes past a tile with a ragged last tile, more channels than pixels),
not only the variant the rule picks; and the rule itself."""

import numpy as np
import pytest

import kuiper
from conftest import assert_every_variant_matches_numpy, write_model
from kuiper.core.errors import BackendError
from kuiper.opencl import spec_of
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


@pytest.mark.parametrize("variant", ["plane", "channel", "tiled"])
@pytest.mark.parametrize("activation", ["nn.ReLU", "nn.GELU"])
def test_a_fused_sum_and_activation_run_in_the_kernels_store(cl_runtime, tmp_path, variant, activation):
    # DenseNet's BatchNorm then ReLU, here with a residual sum between them too: one operator on OpenCL, its
    # kernels applying both as they store, against the reference backend's three operators
    shape = (2, 5, 33, 31)
    bn = ("affine=True eps=1.000000e-3 num_features=5 @bias=(5)f32 @running_mean=(5)f32 @running_var=(5)f32 "
          "@weight=(5)f32")
    text = f"""7767517
7 6
pnnx.Input               in0     0 1 x #x={shape}f32
pnnx.Input               in1     0 1 r #r={shape}f32
nn.BatchNorm2d           bn      1 1 x a {bn} #a={shape}f32
pnnx.Expression          add     2 1 a r s expr=add(@0,@1) #s={shape}f32
{activation:24} act     1 1 s t #t={shape}f32
torch.flatten            flat    1 1 t y start_dim=1 end_dim=-1 #y=(2,{5 * 33 * 31})f32
pnnx.Output              out     1 0 y
""".replace(str(shape), "(2,5,33,31)")
    path = write_model(tmp_path, "bn", text, {f"bn.{k}": v for k, v in statistics(RNG, 5, True).items()})
    x, r = (3.0 * RNG.standard_normal((2, *shape))).astype(np.float32)
    graph = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device))
    (fused,) = [op.layer for op in graph.order if op.type.startswith("nn.BatchNorm2d")]
    assert fused.main.cl_epilogue.add is not None and fused.main.cl_epilogue.act is not None
    fused.main.variants.fix([x.shape, r.shape], variant)
    expected = kuiper.load(path, backend="reference").forward(x, r)[0]
    np.testing.assert_allclose(graph.forward(x, r)[0], expected, rtol=1e-5, atol=1e-5)
    assert set(fused.main.variants.chosen.values()) == {variant}  # no other shape key came up
