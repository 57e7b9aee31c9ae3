"""CustomLayer: what it checks against the operator and the kernel, the defines it compiles with, and
its numpy and OpenCL forwards."""

import numpy as np
import pytest

from kuiper import CustomOpError, ShapeError
from kuiper.custom import CustomLayer, read_config
from kuiper.core.operators import make_operator
from conftest import assert_opencl_matches_numpy, assert_outputs_close, fp16_twin
from custom_op_files import KERNEL, LEAKY_CLAMP, edited, sample, scale_layer, write_op


# ---- checks against the operator ---------------------------------------------------------------------
def test_parameters_come_from_the_operator_or_the_defaults(tmp_path):
    layer = scale_layer(write_op(tmp_path), params={"offset": 1})
    assert layer.params == {"alpha": 2.0, "offset": 1.0}  # alpha's default; offset's int read as a float
    assert layer.param_options == ["-DOFFSET=1.0f"]        # alpha goes by value, not as a define


def test_unknown_parameter(tmp_path):
    path = write_op(tmp_path, edited('offset = { type = "float", default = 0.0 }', 'offset = { type = "float" }'))
    with pytest.raises(CustomOpError) as info:
        scale_layer(path, params={"bias": 1.0})
    assert str(info.value) == (f"{path}: params.offset: test.Scale operator 'op' has no parameter 'offset' and the "
                               f"config gives no default (its parameters: bias)")


def test_parameter_of_the_wrong_type(tmp_path):
    with pytest.raises(CustomOpError, match=r"params.alpha: test.Scale operator 'op': parameter 'alpha' must be a "
                                            r"number, got 'fast'"):
        scale_layer(write_op(tmp_path), params={"alpha": "fast"})


def test_weight_binding_the_operator_lacks(tmp_path):
    config = edited('{ index = 2, param = "alpha" }', '{ index = 2, weight = "gain" }')
    with pytest.raises(CustomOpError, match=r"args\[2\].weight: test.Scale operator 'op' has no weight '@gain' "
                                            r"\(its weights: bias\)"):
        scale_layer(write_op(tmp_path, config), attrs={"bias": np.zeros(3, np.float32)})


def test_input_binding_the_operator_lacks(tmp_path):
    config = edited('{ index = 2, param = "alpha" }', "{ index = 2, input = 1 }")
    with pytest.raises(CustomOpError, match=r"args\[2\].input: test.Scale operator 'op' has 1 input\(s\), no input 1"):
        scale_layer(write_op(tmp_path, config))


# ---- shapes and work sizes -------------------------------------------------------------------------------
def test_output_shape_formulas(tmp_path):
    config = edited('global = ["N*C*H*W"]', 'global = ["N*C*H*W"]\n[output]\nshape = ["N", "C*H*W"]\n')
    layer = scale_layer(write_op(tmp_path, config))
    assert layer.output_shapes([(2, 3, 4, 5)]) == [(2, 60)]
    assert layer.output_shapes([(7, 2)]) == [(7, 2)]
    with pytest.raises(ShapeError, match=r"input0: custom operators take tensors of rank 1 to 4, not 5"):
        layer.output_shapes([(1, 2, 3, 4, 5)])


def test_work_sizes_must_be_positive_and_divisible(tmp_path):
    config = edited('global = ["N*C*H*W"]', 'global = ["W - 5", "N*C*H"]\nlocal = ["1", "4"]')
    layer = scale_layer(write_op(tmp_path, config))
    tensors = [((2, 3, 4, 9), np.float32)]
    assert layer.work_sizes(tensors, tensors) == ((4, 24), (1, 4))
    with pytest.raises(CustomOpError, match=r"worksize.global\[0\]: .* gets 0 from output0 of shape \(2, 3, 4, 5\)"):
        layer.work_sizes([((2, 3, 4, 5), np.float32)], [((2, 3, 4, 5), np.float32)])
    with pytest.raises(CustomOpError, match=r"worksize.local\[1\]: .* gets 4, which does not divide the global size 6"):
        layer.work_sizes([((1, 2, 3, 9), np.float32)], [((1, 2, 3, 9), np.float32)])


# ---- numpy -------------------------------------------------------------------------------------------------
def test_numpy_runs_the_reference(tmp_path):
    x = sample()
    (y,) = scale_layer(write_op(tmp_path), params={"alpha": 0.5, "offset": -1.0}).run_numpy(x)
    np.testing.assert_array_equal(y, x * np.float32(0.5) - 1)


def test_numpy_without_a_reference_says_so(tmp_path):
    path = write_op(tmp_path, edited('reference = "reference.py:scale"\n', ""))
    with pytest.raises(CustomOpError, match=r"reference: test.Scale operator 'op' has no numpy reference function: "
                                            r"it runs only on backend='opencl'"):
        scale_layer(path).run_numpy(sample())


def test_a_reference_of_the_wrong_shape(tmp_path):
    path = write_op(tmp_path, reference="def scale(inputs, weights, params):\n    return inputs[0][0]\n")
    with pytest.raises(CustomOpError, match=r"reference: .* got shape \(3, 4, 5\) from reference.py:scale, the "
                                            r"output shape is \(2, 3, 4, 5\)"):
        scale_layer(path).run_numpy(sample())


# ---- OpenCL ------------------------------------------------------------------------------------------------
def test_opencl_matches_the_reference_at_every_shape(cl_runtime, tmp_path):
    layer = scale_layer(write_op(tmp_path), params={"alpha": -1.5, "offset": 0.25})
    built = cl_runtime.programs_built
    for shape in ((2, 3, 4, 5), (1, 7), (5,), (1, 7)):
        assert_opencl_matches_numpy(layer, cl_runtime, sample(shape))  # with half storage too on one device
    precisions = 1 if fp16_twin(cl_runtime) is None else 2
    assert cl_runtime.programs_built == built + 3 * precisions  # one program per shape signature and precision


def test_leaky_clamp_kernel_matches_its_reference_with_a_slope(cl_runtime):
    op = make_operator("nn.Hardtanh", params={"min_val": -0.5, "max_val": 2, "slope": 0.125}, input_shapes=((3, 70),))
    layer = CustomLayer(op, read_config(LEAKY_CLAMP))
    x = sample((3, 70)) * 3
    x[0, :3] = np.nan, np.inf, -np.inf
    assert_opencl_matches_numpy(layer, cl_runtime, x)
    (y,) = layer.run_numpy(x)
    clamped = np.clip(x, -0.5, 2)
    np.testing.assert_allclose(y[1:], (clamped + 0.125 * (x - clamped))[1:], rtol=1e-6)
    assert np.isnan(y[0, 0]) and y[0, 1] == np.inf and y[0, 2] == -np.inf


def test_kernel_build_failure_names_the_config_and_shows_the_log(cl_runtime, tmp_path):
    path = write_op(tmp_path, kernel=KERNEL.replace("OFFSET", "OFFSET + undefined_name"))
    layer = scale_layer(path)
    with pytest.raises(CustomOpError) as info:
        layer.build_opencl(cl_runtime)  # the operator's input shape is known: it compiles now
    message = str(info.value)
    assert message.startswith(f"{path}: kernel.file: test.Scale operator 'op' needs scale.cl, which failed to build:")
    assert "undefined_name" in message
    assert "-DINPUT0_DIMS={2,3,4,5}" in info.value.__cause__.options  # the KernelBuildError, with the options


def test_entry_point_missing_from_the_kernel(cl_runtime, tmp_path):
    path = write_op(tmp_path, edited('entry = "scale"', 'entry = "scaled"'))
    with pytest.raises(CustomOpError, match=r"kernel.entry: scale.cl has no kernel 'scaled' \(it has scale\)"):
        scale_layer(path).build_opencl(cl_runtime)


def test_argument_count_must_match_the_kernel(cl_runtime, tmp_path):
    path = write_op(tmp_path, kernel=KERNEL.replace(", const float alpha", ", const float alpha, const int n"))
    with pytest.raises(CustomOpError, match=r"args: binds 3 argument\(s\), kernel 'scale' takes 4"):
        scale_layer(path).build_opencl(cl_runtime)


def test_argument_kinds_must_match_the_kernel(cl_runtime, tmp_path):
    path = write_op(tmp_path, kernel=KERNEL.replace("const float alpha", "const int alpha"))
    with pytest.raises(CustomOpError, match=r"args\[2\]: binds param 'alpha' \(a float\) to argument 2, which the "
                                            r"kernel declares as 'int'"):
        scale_layer(path).build_opencl(cl_runtime)


# the scale kernel as written before half storage: float buffers
FLOAT_KERNEL = """__kernel void scale(__global float* y, __global const float* x, const float alpha) {
    const int i = get_global_id(0);
    y[i] = x[i] * alpha + OFFSET;
}
"""


def test_float_buffers_run_with_fp32_storage_and_are_refused_with_half(cl_runtime, tmp_path):
    path = write_op(tmp_path, kernel=FLOAT_KERNEL)
    layer, x = scale_layer(path, params={"alpha": 0.5}), sample()
    assert_outputs_close(layer.run_opencl(cl_runtime, x), layer.run_numpy(x), 1e-6)
    half = fp16_twin(cl_runtime)  # the first device
    if half is None:
        return
    with pytest.raises(CustomOpError) as info:
        layer.build_opencl(half)
    assert str(info.value) == (
        f"{path}: args[0]: test.Scale operator 'op' binds output 0 to argument 0, which kernel 'scale' declares as "
        f"'float*': with precision fp16 float tensors are stored as half; declare it store_t* and read and write it "
        f"with LOAD/STORE (#include \"store.h\")")


DEFINES_CONFIG = """type = "test.Defines"
args = [{ index = 0, output = 0 }, { index = 1, input = 1 }]

[kernel]
file = "defines.cl"
entry = "defines"

[params]
pads = { type = "int[]", default = [1, 2, 3] }
eps = { type = "float" }

[worksize]
global = ["4", "2"]
local = ["2", "1"]
tensor = "input1"

[output]
shape = ["5", "5"]
tensor = "input0"
"""

DEFINES_KERNEL = """#include "store.h"

__kernel void defines(__global store_t* y, __global const store_t* unused) {
    if (get_global_id(0) || get_global_id(1)) return;
    const int dims[] = INPUT1_DIMS, pitches[] = INPUT1_PITCHES, pads[] = PADS;
    const int gws[] = GLOBAL_WORKSIZE, lws[] = LOCAL_WORKSIZE;
    const float values[] = {
        INPUT0_DIMS_N, INPUT0_DIMS_C, INPUT0_DIMS_H, INPUT0_DIMS_W, INPUT0_RANK,
        dims[0], dims[1], dims[2], dims[3], INPUT1_RANK,
        INPUT0_SIZE, INPUT1_SIZE, OUTPUT0_SIZE, OUTPUT0_RANK, OUTPUT0_DIMS_C,
        pitches[0], INPUT1_PITCH_C, INPUT1_PITCH_H, INPUT1_PITCH_W, pitches[3],
        NUM_INPUTS, NUM_OUTPUTS, gws[0], gws[1], lws[0] * 10 + lws[1] };
    for (int i = 0; i < OUTPUT0_SIZE; ++i) STORE(y, i, values[i] + (i == 0 && sizeof(INPUT0_TYPE) != 4 ? 100 : 0));
}
"""


def test_automatic_defines_reach_the_kernel(cl_runtime, tmp_path):
    (tmp_path / "defines.cl").write_text(DEFINES_KERNEL)
    (tmp_path / "defines.toml").write_text(DEFINES_CONFIG)
    op = make_operator("test.Defines", params={"eps": 1e-5}, input_shapes=((2, 3, 4, 5), (6, 7, 8)))
    layer = CustomLayer(op, read_config(tmp_path / "defines.toml"))
    assert layer.param_options == ["-DPADS={1,2,3}", "-DPADS_LEN=3", "-DEPS=1e-05f"]
    # the same with half storage (every value is a small integer, exact in half): INPUT0_TYPE stays float, the
    # type the graph computes in
    for rt in filter(None, (cl_runtime, fp16_twin(cl_runtime))):
        (y,) = layer.run_opencl(rt, np.zeros((2, 3, 4, 5), np.float32), np.zeros((6, 7, 8), np.float32))
        assert y.shape == (5, 5)
        np.testing.assert_array_equal(y.ravel(), [
            2, 3, 4, 5, 4,          # input0: N C H W, rank
            6, 7, 8, 1, 3,          # input1 as NCHW: a missing W is 1
            120, 336, 25, 2, 5,     # sizes, output rank, output C
            56, 8, 1, 1, 1,         # input1's pitches
            2, 1, 4, 2, 21])        # counts, global and local work sizes
