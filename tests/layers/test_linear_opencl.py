"""nn.Linear on OpenCL (one GEMM with a per-column bias, kuiper/opencl/gemm.py; on CPUs a stack of one per
panel of the weights) against its numpy forward, on the numpy tests' ranks and on sizes past the GEMM kernels'
blocks."""

import numpy as np
import pytest

from conftest import assert_every_variant_matches_numpy, assert_opencl_matches_numpy
from test_linear import make_linear

from kuiper.opencl import gemv
from kuiper.opencl.panels import PANEL, panels
from kuiper.opencl.gemv import GEMV, GEMV_ROWS

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("in_features, out_features, shape", [
    (7, 5, (7,)), (7, 5, (1, 7)), (7, 5, (3, 7)), (7, 5, (3, 5, 7)), (7, 5, (2, 3, 1, 7)),
    (512, 1000, (1, 512)),            # ResNet-18's classifier
    (33, 70, (2, 13, 33)),            # rows past a register block, columns past a vector block
    (5, 1, (4, 5)), (1, 17, (9, 1)),  # one output feature, one input feature
    (48, 96, (2, 13, 48)), (20, 32, (5, 20)),  # on CPUs the weights in panels of 32 columns: three, one
])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_opencl_matches_numpy(cl_runtime, in_features, out_features, shape, bias):
    layer, _, _ = make_linear(RNG, in_features, out_features, bias, input_shape=shape)
    assert_opencl_matches_numpy(layer, cl_runtime, RNG.standard_normal(shape).astype(np.float32))


def test_every_gemm_variant_opencl(cl_runtime):
    layer, _, _ = make_linear(RNG, 33, 70, True, input_shape=(2, 13, 33), backend="opencl")
    x = RNG.standard_normal((2, 13, 33), dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    # (the layer's Gemm is now the fp16 twin's, which may add tensor-core variants)
    assert set(layer.gemm.candidates(70)) >= set(names) and len(names) > 4


@pytest.mark.parametrize("in_features, out_features, shape", [
    (1024, 40, (1, 1024)),            # two column groups: K split across work-groups, then added up
    (700, 13, (3, 700)),              # fewer rows than a work-group's block, columns off the float4
    (96, 131, (2 * GEMV_ROWS + 1, 96)),  # three blocks of rows, the last of one
    (33, 70, (2, 1, 33)),
])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("narrow_bytes", [0, 1 << 40], ids=["wide", "narrow"])
def test_gemv_matches_numpy(cl_runtime, monkeypatch, in_features, out_features, shape, bias, narrow_bytes):
    """gemv (cl/gemv.cl), the GPUs' kernel for products of few rows, in both widths of work-group (the size of the
    weights picks one): checked on every device."""
    monkeypatch.setattr(gemv, "GEMV_NARROW_BYTES", narrow_bytes)
    layer, _, _ = make_linear(RNG, in_features, out_features, bias, input_shape=shape)
    assert_opencl_matches_numpy(layer, cl_runtime, RNG.standard_normal(shape).astype(np.float32), variant=GEMV)


@pytest.mark.parametrize("rest", [0, 5, PANEL - 1])
@pytest.mark.parametrize("bias", [True, False])
def test_weights_in_panels_on_cpus(cl_runtime, rest, bias):
    """A CPU device multiplies each whole panel of the weights as a product of its own, by every variant there
    is, and the columns past them (`rest`) as one more product; other devices keep one product."""
    layer, _, _ = make_linear(RNG, 40, 3 * PANEL + rest, bias, input_shape=(2, 7, 40), backend="opencl")
    x = RNG.standard_normal((2, 7, 40), dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    assert layer.cl_weight_t.panels == (3 if cl_runtime.is_cpu else 0)
    assert layer.gemm_dims([x.shape]) == ((14, PANEL, 3) if cl_runtime.is_cpu else (14, 3 * PANEL + rest, 1))
    assert set(layer.gemm.candidates(layer.gemm_dims([x.shape])[1])) >= set(names) and len(names) > 4
    np.testing.assert_array_equal(panels(layer.weight_t[:, :3 * PANEL])[1], layer.weight_t[:, PANEL:2 * PANEL])


@pytest.mark.parametrize("activation", ["nn.GELU", "nn.ReLU"])
def test_a_residual_sum_and_activation_fuse_into_the_gemm(cl_runtime, tmp_path, activation):
    """x -> Linear -> + x -> activation (then flattened: a graph output is never fused) on OpenCL is one operator
    whose GEMM adds and activates as it stores, within float32 rounding of the reference backend. 96 features:
    on CPUs three panels of 32 columns."""
    import kuiper
    from conftest import write_model
    from kuiper.opencl.devices import spec_of

    text = f"""7767517
6 5
pnnx.Input               in0     0 1 x #x=(2,7,96)f32
nn.Linear                fc      1 1 x a bias=True in_features=96 out_features=96 @weight=(96,96)f32 @bias=(96)f32 #a=(2,7,96)f32
pnnx.Expression          add     2 1 a x s expr=add(@0,@1) #s=(2,7,96)f32
{activation:24} act     1 1 s t #t=(2,7,96)f32
torch.flatten            flat    1 1 t y start_dim=1 end_dim=-1 #y=(2,672)f32
pnnx.Output              out     1 0 y
"""
    path = write_model(tmp_path, "mlp", text, {"fc.weight": RNG.standard_normal((96, 96)) / 10,
                                               "fc.bias": RNG.standard_normal(96)})
    graph = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device))
    x = RNG.standard_normal((2, 7, 96), dtype=np.float32)
    fc = graph.order[1]
    assert fc.type == f"nn.Linear+pnnx.Expression+{activation}"
    expected = kuiper.load(path, backend="reference").forward(x)[0]
    np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-5, atol=1e-5)
    # gemv stores with the epilogue too (on CPUs after the weights' panels: a stack of products)
    fc.layer.main.variants.use((x.shape,), GEMV)
    np.testing.assert_allclose(graph.forward(x)[0], expected, rtol=1e-5, atol=1e-5)
