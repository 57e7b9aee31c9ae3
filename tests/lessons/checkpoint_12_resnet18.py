"""Checkpoint of lesson 12: exercises/lesson_12.py counts parameters from the .param text, held to the weights
kuiper reads from the .bin, and folds a BatchNorm into a convolution, held to kuiper's Conv2d followed by its
BatchNorm2d."""

import numpy as np
import pytest

import kuiper.pnnx
from kuiper.runtime.backends import make_layer
from lesson_tools import MODEL_PARAMS, RESNET, exercise

ex = exercise(12)


@pytest.mark.parametrize("param", MODEL_PARAMS, ids=lambda p: p.parent.name)
def test_parameter_count_is_the_size_of_the_weights(param):
    records = kuiper.pnnx.load(param)
    expected = sum(attr.numpy().size for op in records.operators for attr in op.attrs.values())
    assert ex.parameter_count(param) == expected


def test_resnet18_has_11_7_million_parameters():
    assert ex.parameter_count(RESNET) == 11_684_712


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("groups", [1, 2])
def test_folding_is_batchnorm_after_the_convolution(bias, groups):
    rng = np.random.default_rng(groups)
    cin, cout = 4, 6
    x = rng.standard_normal((2, cin, 7, 6)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    stats = dict(weight=rng.uniform(0.5, 2, cout), bias=rng.standard_normal(cout),
                 running_mean=rng.standard_normal(cout), running_var=rng.uniform(0.1, 3, cout))
    stats = {k: v.astype(np.float32) for k, v in stats.items()}
    params = dict(in_channels=cin, out_channels=cout, kernel_size=[3, 3], padding=[1, 1], groups=groups)
    conv = make_layer("nn.Conv2d", input_shapes=(x.shape,), params=dict(params, bias=bias),
                      attrs=dict(weight=w, **({"bias": b} if bias else {})))
    (y,) = conv.run_numpy(x)
    bn = make_layer("nn.BatchNorm2d", input_shapes=(y.shape,), params=dict(num_features=cout, eps=1e-3, affine=True),
                    attrs=stats)
    expected = bn.run_numpy(y)[0]

    fw, fb = ex.fold_batchnorm(w, b, stats["weight"], stats["bias"], stats["running_mean"], stats["running_var"], 1e-3)
    assert fw.shape == w.shape and np.shape(fb) == (cout,)
    folded = make_layer("nn.Conv2d", input_shapes=(x.shape,), params=dict(params, bias=True),
                        attrs=dict(weight=np.asarray(fw, np.float32), bias=np.asarray(fb, np.float32)))
    np.testing.assert_allclose(folded.run_numpy(x)[0], expected, rtol=1e-4, atol=1e-4)
