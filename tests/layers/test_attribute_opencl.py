"""pnnx.Attribute on OpenCL: the constant uploaded at build, copied into the output, bit for bit, any dtype."""

import numpy as np
import pytest

from kuiper.runtime.backends import make_layer

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("value", [
    RNG.standard_normal((1, 5, 1, 9)).astype(np.float32),
    RNG.standard_normal((3, 7, 13)).astype(np.float32),
    np.float32(2.5).reshape(()),
    RNG.integers(-9, 9, (5, 7)),                     # int64
    RNG.standard_normal((13,)).astype(np.float16),
], ids=["1x5x1x9", "3x7x13", "scalar", "int64", "float16"])
def test_the_constant_is_copied_exactly(cl_runtime, value):
    layer = make_layer("pnnx.Attribute", backend="opencl", attrs={"data": value}, input_shapes=[])
    assert layer.supports_opencl
    (out,) = layer.run_opencl(cl_runtime)
    assert out.dtype == value.dtype
    np.testing.assert_array_equal(out, value)


def test_every_forward_copies_again(cl_runtime):
    """The output is a buffer of the memory plan that others reuse: each forward must refill it."""
    from kuiper.opencl import DeviceTensor, Enqueuer

    value = RNG.standard_normal((3, 5)).astype(np.float32)
    layer = make_layer("pnnx.Attribute", backend="opencl", attrs={"data": value}, input_shapes=[])
    layer.build_opencl(cl_runtime)
    out = DeviceTensor(cl_runtime, cl_runtime.allocate(value.nbytes), value.shape)
    for _ in range(2):
        q = Enqueuer(cl_runtime)
        q.begin(layer.op, ())
        layer.forward_opencl(q, [], [out])
        np.testing.assert_array_equal(out.numpy(), value)
        q.write(out.buffer, np.zeros_like(value))  # another operator reusing the slot
        q.finish()
