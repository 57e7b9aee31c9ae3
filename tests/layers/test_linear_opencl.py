"""nn.Linear on OpenCL (one GEMM with a per-column bias, kuiper/opencl/gemm.py; on CPUs a stack of one per
panel of the weights) against its numpy forward, on the numpy tests' ranks and on sizes past the GEMM kernels'
blocks."""

import numpy as np
import pytest

from conftest import assert_every_variant_matches_numpy, assert_opencl_matches_numpy
from test_linear import make_linear

from kuiper.opencl.gemm import PANEL, panels

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
    layer, _, _ = make_linear(RNG, 33, 70, True, input_shape=(2, 13, 33))
    x = RNG.standard_normal((2, 13, 33), dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    assert len(names) == len(layer.gemm.candidates(70)) > 4


def test_weights_in_panels_on_cpus(cl_runtime):
    """Where the output features are a multiple of PANEL, a CPU device multiplies each panel of the weights as a
    product of its own, by every variant there is; other devices and widths keep one product."""
    layer, _, _ = make_linear(RNG, 40, 3 * PANEL, True, input_shape=(2, 7, 40))
    x = RNG.standard_normal((2, 7, 40), dtype=np.float32)
    names = assert_every_variant_matches_numpy(layer, cl_runtime, x)
    assert layer.cl_weight_t.panels == (3 if cl_runtime.is_cpu else 0)
    assert layer.gemm_dims([x.shape]) == ((14, PANEL, 3) if cl_runtime.is_cpu else (14, 3 * PANEL, 1))
    assert len(names) == len(layer.gemm.candidates(layer.gemm_dims([x.shape])[1]))
    np.testing.assert_array_equal(panels(layer.weight_t)[1], layer.weight_t[:, PANEL:2 * PANEL])
