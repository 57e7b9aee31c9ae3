"""pnnx's aten:: fallbacks (kuiper/layers/aten.py): aten::clamp_min/clamp_max with a tensor bound and aten::zero,
alone on every path, and in swin_v2's pattern as pnnx writes it (a bare-literal constant pnnx.Expression as the
bound), on every backend."""

import warnings

import numpy as np
import pytest

import kuiper
from conftest import FP16_RTOL, OPENCL_DEVICES, assert_every_path_matches_reference
from kuiper.core.errors import LayerError
from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(17)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("type, pick", [("aten::clamp_min", max), ("aten::clamp_max", min)])
@pytest.mark.parametrize("bound_shape", [(), (3, 1), (5,), (2, 3, 5)])
def test_clamp_with_a_tensor_bound(type, pick, bound_shape):
    x, bound = randn(2, 3, 5), randn(*bound_shape)
    (out,) = make_layer(type, input_shapes=[x.shape, bound.shape]).run_numpy(x, bound)
    broadcast = np.broadcast_to(bound, x.shape)
    expected = np.array([pick(a, b) for a, b in zip(x.ravel(), broadcast.ravel())]).reshape(x.shape)
    np.testing.assert_array_equal(out, expected)
    assert_every_path_matches_reference(type, x, bound)


@pytest.mark.parametrize("shapes", [[(2, 3, 5)] * 4, [(1, 3, 1), (3, 1), (2, 3, 5), ()], [(5,), (2, 3, 1), (3, 5), (1,)]])
def test_addcmul_is_x_plus_value_times_the_product(shapes):
    x, t1, t2, value = (randn(*shape) for shape in shapes)
    (out,) = make_layer("aten::addcmul", input_shapes=shapes).run_numpy(x, t1, t2, value)
    expected = x.astype(np.float64) + value.astype(np.float64) * t1 * t2.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert_every_path_matches_reference("aten::addcmul", x, t1, t2, value)


# ConvNeXt V2's global response norm as pnnx writes it: addcmul's value is a constant `expr=1`, an int64 0-d
# tensor, which must neither promote the float32 result nor reach a float32 kernel
CONVNEXT_V2 = """7767517
6 5
pnnx.Input               in0          0 1 0 #0=(2,3,4,5)f32
pnnx.Input               in1          0 1 1 #1=(1,3,1,1)f32
pnnx.Expression          pnnx_expr_0  0 1 2 expr=2
aten::addcmul            pnnx_1       4 1 1 1 0 2 3 #1=(1,3,1,1)f32 #1=(1,3,1,1)f32 #0=(2,3,4,5)f32 #3=(2,3,4,5)f32
pnnx.Expression          pnnx_expr_1  2 1 0 3 4 expr=add(@0,@1) #0=(2,3,4,5)f32 #3=(2,3,4,5)f32 #4=(2,3,4,5)f32
pnnx.Output              out0         1 0 4
"""


def test_addcmul_with_a_constant_value_on_every_backend(tmp_path):
    path = tmp_path / "convnext_v2.pnnx.param"
    path.write_text(CONVNEXT_V2)
    x, w = randn(2, 3, 4, 5), randn(1, 3, 1, 1)
    expected = x + (w + 2 * w * x)
    for backend, device in [("reference", None), ("numpy", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every operator runs on the backend itself: no host fallback
            graph = kuiper.load(path, backend=backend, **({"device": device} if device else {}))
            (out,) = graph.forward(x, w)
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6, err_msg=f"{backend} {device}")


def test_clamp_keeps_nans_and_the_input_dtype():
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    for type in ("aten::clamp_min", "aten::clamp_max"):
        layer = make_layer(type, input_shapes=[(3,), ()])
        (out,) = layer.run_numpy(x, np.array(0.5, np.float32))
        assert np.isnan(out[0]) and out.dtype == np.float32
        assert_every_path_matches_reference(type, x, np.array(np.nan, np.float32))
        # a 0-d constant of another dtype does not widen the input (PyTorch's rule for 0-d tensors) ...
        assert layer.output_dtypes([np.dtype(np.float32), np.dtype(np.int64)]) == [np.float32]
        # ... but a fraction makes an integer input float
        assert layer.output_dtypes([np.dtype(np.int64), np.dtype(np.float32)]) == [np.float32]


def test_clamp_takes_two_inputs():
    with pytest.raises(LayerError, match=r"aten::clamp_min operator 'op': expects 2 input\(s\), the graph gives 1"):
        make_layer("aten::clamp_min", input_shapes=[(3,)])


@pytest.mark.parametrize("shape, dtype", [((96,), np.float32), ((2, 3, 4), np.float32),
                                          ((0, 3), np.float32), ((5,), np.int64)])
def test_zero_is_zeros_shaped_like_its_input(shape, dtype):
    x = np.full(shape, np.nan if dtype == np.float32 else 7, dtype)  # nothing of the input survives
    layer = make_layer("aten::zero", input_shapes=[shape])
    (out,) = layer.run_numpy(x)
    assert out.shape == shape and out.dtype == dtype and not out.any()
    assert_every_path_matches_reference("aten::zero", x)


# swin_v2's normalized attention as pnnx writes it: the clamp's bound is a constant pnnx.Expression with a bare
# literal; aten::zero zeroes a bias (a pnnx.Attribute in swin_v2, a second graph input here)
SWIN_V2 = """7767517
9 8
pnnx.Input               in0          0 1 0 #0=(2,3,4,8)f32
pnnx.Input               in1          0 1 5 #5=(8)f32
pnnx.Expression          pnnx_expr_0  0 1 1 expr=1.000000e-12
torch.norm               norm         1 1 0 2 dim=(-1) keepdim=True p=2.0 $input=0 #0=(2,3,4,8)f32 #2=(2,3,4,1)f32
aten::clamp_min          pnnx_1       2 1 2 1 3 #2=(2,3,4,1)f32 #3=(2,3,4,1)f32
pnnx.Expression          pnnx_expr_1  2 1 0 3 4 expr=div(@0,@1) #0=(2,3,4,8)f32 #3=(2,3,4,1)f32 #4=(2,3,4,8)f32
aten::zero               pnnx_2       1 1 5 6 #5=(8)f32 #6=(8)f32
pnnx.Expression          pnnx_expr_2  2 1 4 6 7 expr=add(@0,@1) #4=(2,3,4,8)f32 #6=(8)f32 #7=(2,3,4,8)f32
pnnx.Output              out0         1 0 7
"""


def test_swin_v2_pattern_on_every_backend(tmp_path):
    path = tmp_path / "swin_v2.pnnx.param"
    path.write_text(SWIN_V2)
    x, bias = randn(2, 3, 4, 8), randn(8)
    x[0, 0, 0] = 0  # a zero vector: its norm is clamped to 1e-12, and 0 / 1e-12 stays 0
    norm = np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True))
    expected = x / np.maximum(norm, 1e-12)
    backends = [("reference", None, "fp32"), ("numpy", None, "fp32")] + \
        [("opencl", spec, "fp32") for spec in OPENCL_DEVICES] + [("opencl", spec, "fp16") for spec in OPENCL_DEVICES[:1]]
    for backend, device, precision in backends:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every operator runs on the backend itself: no host fallback
            graph = kuiper.load(path, backend=backend, precision=precision, **({"device": device} if device else {}))
            (out,) = graph.forward(x, bias)
        # with half storage 1e-12 would round to 0, and 0 / 0 give NaN: the constant is kept nonzero
        rtol, atol = (1e-5, 1e-6) if precision == "fp32" else (FP16_RTOL, FP16_RTOL)
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol, err_msg=f"{backend} {device} {precision}")
