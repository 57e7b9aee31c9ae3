"""Every committed model with precision="fp16" (half storage, float arithmetic) on the first OpenCL device,
against PyTorch's saved fp32 outputs, within FP16_MODEL_RTOL of each output's largest value."""

import warnings

import numpy as np
import pytest

import kuiper
from conftest import OPENCL_DEVICES, model_cases, model_names, model_paths
from kuiper.app.references import TOLERANCES

# Every tensor between two layers is rounded to half (relative 2^-11 = 4.9e-4), as are the weights; through a
# dozen layers these roundings add up to a few thousandths of the largest output (act_zoo: 6.6e-3 on PoCL)
FP16_MODEL_RTOL = TOLERANCES["fp16"]

pytestmark = pytest.mark.skipif(not OPENCL_DEVICES, reason="no usable OpenCL device")


@pytest.mark.parametrize("name", model_names())
def test_model_in_fp16_matches_pytorch_within_half_precision(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kuiper.KuiperWarning)  # host fallbacks are listed, not errors
        graph = kuiper.load(*model_paths(name), backend="opencl", device=OPENCL_DEVICES[0], precision="fp16")
    for case, inputs, references in model_cases(name):
        outputs = graph.forward(*inputs)
        assert len(outputs) == len(references)
        for out, ref in zip(outputs, references):
            assert out.shape == ref.shape and out.dtype == ref.dtype, case
            scale = max(1.0, float(np.abs(ref).max()))
            np.testing.assert_allclose(out, ref, rtol=FP16_MODEL_RTOL, atol=FP16_MODEL_RTOL * scale, err_msg=case)


def test_fp16_stores_tensors_as_half_and_returns_float32():
    graph = kuiper.load(*model_paths("conv_zoo"), backend="opencl", device=OPENCL_DEVICES[0], precision="fp16")
    (_, inputs, references), *_ = model_cases("conv_zoo")
    out = graph.forward(*inputs)[0]
    assert out.dtype == np.float32
    stored = {t.dtype for t in graph.plan_for(*(x.shape for x in inputs)).tensors.values()}
    assert stored == {np.dtype(np.float16)}


def test_fp16_stores_integer_inputs_as_they_are():
    # token ids and a padding mask: half would round ids past 2048, so only float32 tensors are stored as half
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kuiper.KuiperWarning)  # its embeddings and mask run on the host
        graph = kuiper.load(*model_paths("bert_tiny"), backend="opencl", device=OPENCL_DEVICES[0], precision="fp16")
    (_, inputs, _), *_ = model_cases("bert_tiny")
    plan = graph.plan_for(*(x.shape for x in inputs))
    fed = [plan.tensors[op.output_operand.name].dtype for op in graph.input_operators]
    assert fed == [np.dtype(np.int64)] * 3
    assert {t.dtype for t in plan.tensors.values()} == {np.dtype(np.int64), np.dtype(np.bool_), np.dtype(np.float16)}


def test_tf32_stores_float32_and_matches_pytorch_within_its_tolerance():
    # float storage; products on tensor cores round their operands to TF32 where the device has them (else fp32)
    graph = kuiper.load(*model_paths("conv_zoo"), backend="opencl", device=OPENCL_DEVICES[0], precision="tf32")
    (_, inputs, references), *_ = model_cases("conv_zoo")
    out, ref = graph.forward(*inputs)[0], references[0]
    stored = {t.dtype for t in graph.plan_for(*(x.shape for x in inputs)).tensors.values()}
    assert stored == {np.dtype(np.float32)}
    rtol = TOLERANCES["tf32"]
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("backend", ["numpy", "reference"])
def test_fp16_needs_the_opencl_backend(backend):
    with pytest.raises(kuiper.ConfigError, match="precision fp16 needs the opencl backend"):
        kuiper.load(*model_paths("conv_zoo"), backend=backend, precision="fp16")


def test_unknown_precision_is_refused():
    with pytest.raises(kuiper.ConfigError, match="unknown precision 'bf16'"):
        kuiper.load(*model_paths("conv_zoo"), backend="opencl", precision="bf16")
