"""The fused operator's epilogue on the host (kuiper/layers/fused.py): what runs when a fused operator made for
the device falls back to numpy."""

import numpy as np
import pytest

from kuiper.layers.fused import Epilogue, EpilogueStep
from kuiper.runtime.backends import make_layer


@pytest.mark.parametrize("type_", ["nn.GELU", "nn.SiLU", "nn.Sigmoid", "nn.ReLU"])
def test_an_epilogue_activation_gives_its_own_forward_whether_or_not_it_works_in_place(type_):
    x = np.random.default_rng(3).standard_normal((2, 5, 7)).astype(np.float32) * 3
    residual = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    activation = make_layer(type_, input_shapes=[x.shape])
    out = x.copy()
    Epilogue([EpilogueStep(make_layer("pnnx.Expression", params={"expr": "add(@0,@1)"},
                                      input_shapes=[x.shape, x.shape]), extra=1),
              EpilogueStep(activation)], [x, residual]).apply(out)
    np.testing.assert_array_equal(out, activation.run_numpy(x + residual)[0])
