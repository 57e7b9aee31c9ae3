"""LayerNorm and GroupNorm against the definition, computed in float64 one normalised group at a time; every
path (the fast CPU LayerNorm on 1-3 threads, OpenCL on every device, its work-group kernel too) against the
reference; and every bad parameter or shape as a one-line kuiper error."""


import numpy as np
import pytest

from conftest import allocated_during, assert_every_path_matches_reference, assert_opencl_matches_numpy
from kuiper.cpu import layer_norm as fast_layer_norm
from kuiper.cpu import threads
from kuiper.core.errors import LayerError, ShapeError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(11)


def data(*shape, offset=0.0):
    return (RNG.standard_normal(shape) * 3 + offset).astype(np.float32)


def normalise(values, eps):
    """One group of values by the textbook formula: population variance, eps inside the root."""
    values = values.astype(np.float64)
    mean = values.sum() / values.size
    variance = ((values - mean) ** 2).sum() / values.size
    return (values - mean) / np.sqrt(variance + eps)


def expected_layer_norm(x, dims, eps, weight=None, bias=None):
    out = np.empty(x.shape, np.float64)
    for index in np.ndindex(x.shape[:x.ndim - dims]):
        out[index] = normalise(x[index], eps)
    return out * (1 if weight is None else weight) + (0 if bias is None else bias)


def expected_group_norm(x, groups, eps, weight=None, bias=None):
    out = np.empty(x.shape, np.float64)
    per_group = x.shape[1] // groups
    for n in range(x.shape[0]):
        for g in range(groups):
            channels = slice(g * per_group, (g + 1) * per_group)
            out[n, channels] = normalise(x[n, channels], eps)
    pixels = (1,) * (x.ndim - 2)
    if weight is not None:
        out *= weight.reshape(-1, *pixels)
    if bias is not None:
        out += bias.reshape(-1, *pixels)
    return out


def layer_norm(shape, eps=1e-5, affine=True, x_shape=None):
    attrs = dict(weight=data(*shape), bias=data(*shape)) if affine else {}
    params = dict(normalized_shape=list(shape), eps=eps, elementwise_affine=affine)
    return make_layer("nn.LayerNorm", params=params, attrs=attrs, input_shapes=[x_shape or (1,) + shape]), attrs


@pytest.mark.parametrize("x_shape, dims", [((2, 5, 8), 1), ((2, 5, 8), 2), ((3, 7), 1), ((9,), 1), ((1, 4, 4, 6), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_the_definition(x_shape, dims, affine):
    layer, attrs = layer_norm(x_shape[len(x_shape) - dims:], eps=1e-3, affine=affine)
    x = data(*x_shape, offset=2)
    (out,) = layer.run_numpy(x)
    np.testing.assert_allclose(out, expected_layer_norm(x, dims, 1e-3, attrs.get("weight"), attrs.get("bias")),
                               rtol=1e-5, atol=1e-5)


def test_a_large_mean_keeps_its_digits():
    # around 1000, one pass, E[x^2] - E[x]^2 in float32, was 0.1 off here; two passes stay within 1e-4
    layer, _ = layer_norm((64,), affine=False)
    x = (1000 + RNG.standard_normal((4, 64))).astype(np.float32)
    (out,) = layer.run_numpy(x)
    np.testing.assert_allclose(out, expected_layer_norm(x, 1, 1e-5), atol=2e-4)


@pytest.mark.parametrize("given", [(), ("weight",), ("bias",), ("weight", "bias")])
def test_functional_layer_norm_takes_weight_and_bias_as_inputs(given):
    x, weight, bias = data(2, 3, 5), data(5), data(5)
    arrays = {"weight": weight, "bias": bias}
    params = dict(normalized_shape=[5], eps=1e-4) | {key: None for key in ("weight", "bias") if key not in given}
    inputs = [x] + [arrays[key] for key in given]
    layer = make_layer("F.layer_norm", params=params, input_shapes=[a.shape for a in inputs])
    (out,) = layer.run_numpy(*inputs)
    expected = expected_layer_norm(x, 1, 1e-4, *(arrays[key] if key in given else None for key in ("weight", "bias")))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape, groups", [((2, 6, 4, 3), 2), ((2, 6, 4, 3), 6), ((3, 6, 7), 3), ((3, 6), 1),
                                             ((1, 4, 2, 3, 2), 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_matches_the_definition(x_shape, groups, affine):
    c = x_shape[1]
    attrs = dict(weight=data(c), bias=data(c)) if affine else {}
    params = dict(num_groups=groups, eps=1e-3, affine=affine) | ({"num_channels": c} if affine else {})
    layer = make_layer("nn.GroupNorm", params=params, attrs=attrs, input_shapes=[x_shape])
    x = data(*x_shape, offset=-1)
    (out,) = layer.run_numpy(x)
    np.testing.assert_allclose(out, expected_group_norm(x, groups, 1e-3, attrs.get("weight"), attrs.get("bias")),
                               rtol=1e-5, atol=1e-5)


def test_functional_group_norm_takes_its_weight_as_an_input():
    x, weight = data(2, 6, 5), data(6)
    layer = make_layer("F.group_norm", params=dict(num_groups=3, eps=1e-2, bias=None), input_shapes=[x.shape, (6,)])
    (out,) = layer.run_numpy(x, weight)
    np.testing.assert_allclose(out, expected_group_norm(x, 3, 1e-2, weight), rtol=1e-5, atol=1e-5)


# ---- every path: the fast CPU LayerNorm, and OpenCL -------------------------------------------------------
@pytest.mark.parametrize("x_shape, shape", [((1, 56, 56, 96), (96,)), ((1, 197, 768), (768,)), ((3, 5, 7), (5, 7)),
                                            ((2, 1), (1,)), ((0, 4), (4,))])
def test_layer_norm_every_path(x_shape, shape):
    _, attrs = layer_norm(shape)
    params = dict(normalized_shape=list(shape), eps=1e-6, elementwise_affine=True)
    checked = assert_every_path_matches_reference("nn.LayerNorm", data(*x_shape, offset=5), params=params, attrs=attrs)
    assert checked == ["forward_numpy"]


def test_functional_norms_every_path():
    x, weight, bias = data(2, 6, 9), data(6), data(6)
    assert_every_path_matches_reference("F.layer_norm", x, bias[:1].repeat(9),
                                        params=dict(normalized_shape=[9], eps=1e-5, weight=None))
    assert_every_path_matches_reference("F.group_norm", x, weight, bias, params=dict(num_groups=2, eps=1e-5))
    assert_every_path_matches_reference("nn.GroupNorm", data(2, 8, 5, 5),
                                        params=dict(num_groups=4, num_channels=8, eps=1e-5, affine=True),
                                        attrs=dict(weight=data(8), bias=data(8)))


@pytest.mark.parametrize("count", [1, 3])
def test_the_fast_layer_norm_keeps_no_stale_statistics(monkeypatch, count):
    """The fast LayerNorm keeps a column of row statistics between forwards: at one shape twice with new values,
    then at two shapes in turn, split into many bands, it still matches the definition, and holds what its
    workspace_bytes says."""
    monkeypatch.setattr(fast_layer_norm, "PART_ELEMENTS", 16)
    _, attrs = layer_norm((6,))
    params = dict(normalized_shape=[6], eps=1e-5, elementwise_affine=True)
    layer = make_layer("nn.LayerNorm", backend="numpy", params=params, attrs=attrs, input_shapes=[(4, 9, 6)])
    assert layer.keeps_workspace
    threads.set_num_threads(count)
    try:
        for x in (data(4, 9, 6, offset=3), data(4, 9, 6), data(2, 5, 6, offset=-7), data(4, 9, 6), data(2, 5, 6)):
            with threads.active():
                (out,) = layer.run_numpy(x)
            np.testing.assert_allclose(out, expected_layer_norm(x, 1, 1e-5, attrs["weight"], attrs["bias"]),
                                       rtol=1e-4, atol=1e-4)
            assert sum(b.nbytes for b in layer.scratch._buffers.values()) == layer.workspace_bytes([x.shape])
    finally:
        threads.set_num_threads(None)


def test_the_fast_layer_norm_writes_an_output_given_as_a_strided_view():
    x = data(3, 4, 6)
    params = dict(normalized_shape=[6], eps=1e-5, elementwise_affine=False)
    wide = np.zeros((3, 4, 12), np.float32)
    make_layer("nn.LayerNorm", backend="numpy", params=params, input_shapes=[x.shape]).forward_numpy([x], [wide[..., ::2]])
    np.testing.assert_allclose(wide[..., ::2], expected_layer_norm(x, 1, 1e-5), rtol=1e-4, atol=1e-4)
    assert not wide[..., 1::2].any()


def test_a_second_fast_layer_norm_allocates_no_large_array():
    """20,000 rows: a column of their statistics is 80 KB, which the layer keeps rather than making anew (a band
    made it in two arrays at every call). What is left are numpy's 32 KiB buffers for the broadcast weight."""
    _, attrs = layer_norm((16,))
    x = data(1, 20000, 16)
    layer = make_layer("nn.LayerNorm", backend="numpy", params=dict(normalized_shape=[16], eps=1e-5, elementwise_affine=True),
                       attrs=attrs, input_shapes=[x.shape])
    out = np.empty_like(x)
    threads.set_num_threads(1)
    try:
        with threads.active():
            layer.forward_numpy([x], [out])
            peak = allocated_during(lambda: layer.forward_numpy([x], [out]))
    finally:
        threads.set_num_threads(None)
    assert peak < 64 << 10
    np.testing.assert_allclose(out, expected_layer_norm(x, 1, 1e-5, attrs["weight"], attrs["bias"]), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("type, params, shapes", [
    ("F.layer_norm", dict(normalized_shape=[300], eps=1e-5, weight=None, bias=None), [(5, 300)]),  # longer than a group
    ("F.group_norm", dict(num_groups=3, eps=1e-5), [(2, 6, 9, 9), (6,), (6,)]),
    ("F.layer_norm", dict(normalized_shape=[7], eps=1e-5), [(4, 7), (7,), (7,)]),
])
def test_work_group_kernel_on_every_device(cl_runtime, monkeypatch, type, params, shapes):
    """Posing as a GPU, the device runs the one-group-per-row kernel with groups wider than one work-item."""
    monkeypatch.setattr(cl_runtime, "is_cpu", False)
    layer = make_layer(type, params=params, input_shapes=shapes)
    assert_opencl_matches_numpy(layer, cl_runtime, *(data(*s, offset=3) for s in shapes))


# ---- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("type, params, attrs, shapes, message", [
    ("nn.LayerNorm", dict(eps=1e-5, elementwise_affine=False), {}, [(2, 4)], "missing parameter 'normalized_shape'"),
    ("nn.LayerNorm", dict(normalized_shape=[0], elementwise_affine=False), {}, [(2, 4)], r"normalized_shape=\[0\]"),
    ("nn.LayerNorm", dict(normalized_shape=[4], elementwise_affine=True), {}, [(2, 4)], "missing weight '@weight'"),
    ("nn.LayerNorm", dict(normalized_shape=[4], elementwise_affine=True), dict(weight=np.ones(3), bias=np.ones(4)),
     [(2, 4)], r"weight '@weight' has shape \(3,\), expected \(4,\)"),
    ("nn.LayerNorm", dict(normalized_shape=[4], eps=float("nan"), elementwise_affine=False), {}, [(2, 4)],
     "'eps' must be finite"),
    ("nn.LayerNorm", dict(normalized_shape=[4], elementwise_affine=False), {}, [(2, 4), (4,)], "expects 1 input"),
    ("nn.LayerNorm", dict(normalized_shape=[4], elementwise_affine=False, bias=False), {}, [(2, 4)],
     r"unknown parameter\(s\) bias"),
    ("F.layer_norm", dict(normalized_shape=[4], weight=None), {}, [(2, 4)], r"expects 2 input\(s\) \(input, bias\)"),
    ("F.layer_norm", dict(normalized_shape=[4], weight=3, bias=None), {}, [(2, 4)],
     "'weight' must be None or an input"),
    ("nn.GroupNorm", dict(num_groups=0, num_channels=4, affine=False), {}, [(2, 4)], "num_groups must be >= 1"),
    ("nn.GroupNorm", dict(num_groups=3, num_channels=4, affine=False), {}, [(2, 4)],
     "num_channels=4 must be a positive"),
    ("nn.GroupNorm", dict(num_groups=2, affine=True), {}, [(2, 4)], "missing parameter 'num_channels'"),
])
def test_bad_parameters_are_one_line_layer_errors(type, params, attrs, shapes, message):
    attrs = {k: np.asarray(v, np.float32) for k, v in attrs.items()}
    with pytest.raises(LayerError, match=message) as info:
        make_layer(type, params=params, attrs=attrs, input_shapes=shapes)
    assert type in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("type, params, shapes, message", [
    ("F.layer_norm", dict(normalized_shape=[4, 5], weight=None, bias=None), [(2, 5, 4)],
     r"normalized_shape=\(4, 5\) must end the input's shape, got \(2, 5, 4\)"),
    ("F.layer_norm", dict(normalized_shape=[4], bias=None), [(2, 4), (5,)],
     r"weight must have shape \(4,\), got \(5,\)"),
    ("F.group_norm", dict(num_groups=4, weight=None, bias=None), [(2, 6, 3)], "C a multiple of num_groups=4"),
    ("F.group_norm", dict(num_groups=1, weight=None, bias=None), [(6,)], r"expects input \(N, C, ...\)"),
    ("F.group_norm", dict(num_groups=2, weight=None), [(2, 6, 3), (4,)], r"bias must have shape \(6,\), got \(4,\)"),
    ("nn.GroupNorm", dict(num_groups=2, num_channels=4, affine=False), [(2, 6, 3)], "expects 4 channels"),
])
def test_bad_shapes_are_one_line_shape_errors(type, params, shapes, message):
    layer = make_layer(type, params=params, input_shapes=shapes)
    with pytest.raises(ShapeError, match=message) as info:
        layer.output_shapes(shapes)
    assert "\n" not in str(info.value)
