"""Language models with int8 weights (kuiper.llm.load(quantize="int8")): every Linear of the decoder becomes an
Int8Linear whose weights dequantize to the checkpoint's within half a step, and the model's logits, prefill and
decode, equal those of the float model given the dequantized weights, on every backend and usable OpenCL device."""

import json
import subprocess
import sys

import numpy as np
import pytest

import kuiper
from conftest import MODELS, OPENCL_DEVICES
from kuiper.core.errors import ConfigError, MemoryLimitError
from kuiper.layers.int8_linear import Int8Linear, dequantize, quantize
from kuiper.layers.linear import Linear
from kuiper.llm.quantize import float_weight

BACKENDS = [("reference", None), ("numpy", None)] + [("opencl", spec) for spec in OPENCL_DEVICES]
# untied, biases and tied, bf16, head_dim apart, heads normed
CHECKPOINTS = ["llama_gqa", "qwen2", "llama_bf16", "mistral", "qwen3"]
SHAKESPEARE = MODELS / "shakespeare"


def dequantized_float_model(directory):
    """The float model on the reference backend with each Linear's weights replaced by dequantize(quantize(w))."""
    lm = kuiper.llm.load(directory, backend="reference")
    linears = [op for op in lm.graph.order if isinstance(op.layer, Linear)]
    assert len(linears) == 7 * lm.config.num_hidden_layers + 1
    for op in linears:
        weight = float_weight(lm.weights, f"{op.name}.weight")
        op.layer.weight_t = np.ascontiguousarray(dequantize(*quantize(weight)).T)
    return lm


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_int8_model_is_the_float_model_with_dequantized_weights(name, backend, device):
    directory = MODELS / "llm" / name
    prompt = [int(i) for i in np.load(directory / "reference.npz")["prompt_ids"]]
    expected_lm = dequantized_float_model(directory)
    lm = kuiper.llm.load(directory, backend=backend, device=device, quantize="int8")
    quantized = [op for op in lm.graph.order if isinstance(op.layer, Int8Linear)]
    assert sum(len(op.absorbed) or 1 for op in quantized) == 7 * lm.config.num_hidden_layers + 1
    joined = [op for op in quantized if op.type == "+".join(["kuiper.Int8Linear"] * 3)]  # q, k, v: runtime/siblings.py
    assert len(joined) == (0 if backend == "reference" else lm.config.num_hidden_layers)
    assert not any(isinstance(op.layer, Linear) for op in lm.graph.order)
    assert all(op.layer.qweight.dtype == np.int8 for op in quantized)
    scale = float(np.abs(expected_lm.logits(prompt)).max())
    np.testing.assert_allclose(lm.logits(prompt), expected_lm.logits(prompt), rtol=0, atol=1e-4 * scale)
    # three decode steps after the prompt, against the cache
    expected_lm.logits(prompt)
    lm.logits(prompt)
    for step, token in enumerate([5, 17, 2]):
        np.testing.assert_allclose(lm.forward([token], len(prompt) + step), expected_lm.forward([token], len(prompt)
                                   + step), rtol=0, atol=1e-4 * scale)


def test_the_quantized_weights_are_the_checkpoints_within_half_a_step():
    lm = kuiper.llm.load(SHAKESPEARE, quantize="int8", backend="numpy")
    op = next(op for op in lm.graph.order if op.name == "model.layers.2.mlp.down_proj")
    weight = float_weight(lm.weights, "model.layers.2.mlp.down_proj.weight")
    layer = op.layer
    steps = np.repeat(layer.scales, 32, axis=1)[:, :weight.shape[1]]
    assert np.all(np.abs(dequantize(layer.qweight, layer.scales) - weight) <= steps / 2 * (1 + 1e-5))
    # lm_head is tied to the embedding: quantized from it, while the embedding itself stays float
    head = next(op.layer for op in lm.graph.order if op.name == "lm_head")
    table = float_weight(lm.weights, "model.embed_tokens.weight")
    assert head.qweight.shape == table.shape
    q, scales = quantize(table)
    np.testing.assert_array_equal(head.qweight, q)
    np.testing.assert_array_equal(head.scales, scales)
    assert next(op.layer for op in lm.graph.order if op.name == "model.embed_tokens").table.dtype == np.float32


def test_int8_weights_take_a_quarter_of_the_memory():
    """A memory limit between the int8 model's need and the float model's: int8 loads, float32 is refused."""
    lm = kuiper.llm.load(SHAKESPEARE, quantize="int8", context=64, backend="numpy")
    layers = [op.layer for op in lm.graph.order if isinstance(op.layer, Int8Linear)]
    int8_bytes = sum(layer.qweight.nbytes + layer.scales.nbytes for layer in layers)
    assert int8_bytes < 0.3 * 4 * sum(layer.qweight.size for layer in layers)  # float32: 4 bytes a weight
    limit = 10 << 20  # float32 weights: 15.8 MB, and lm_head's (tied) 4.2 MB
    kuiper.llm.load(SHAKESPEARE, quantize="int8", context=64, memory_limit=limit, backend="numpy")
    with pytest.raises(MemoryLimitError, match="the weights in float32"):
        kuiper.llm.load(SHAKESPEARE, context=64, memory_limit=limit, backend="numpy")


@pytest.mark.parametrize("quantize", ["int4", "INT8", 8, True])
def test_unknown_schemes_are_refused(quantize):
    with pytest.raises(ConfigError, match="quantize="):
        kuiper.llm.load(SHAKESPEARE, quantize=quantize, backend="numpy")


def test_generate_quantize_int8_on_the_command_line():
    command = [sys.executable, "-m", "kuiper", "generate", "--prompt", "ROMEO.", "--quantize", "int8",
               "--temperature", "0", "--max-new-tokens", "8", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    tokens = json.loads(done.stdout)["tokens"]
    lm = kuiper.llm.load(SHAKESPEARE, quantize="int8", backend="numpy")
    assert tokens == lm.generate(lm.tokenizer.encode("ROMEO."), max_new_tokens=8)
