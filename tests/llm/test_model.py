"""kuiper.llm on tiny checkpoints made in the test (tests/llm/llm_tools.py) against a decoder written directly in
numpy: the prefill logits, the logits of each decode step through the KV cache, and the greedy tokens, for each
variant of the family (grouped-query attention with 2 groups and with one KV head, Qwen2's biases and tied
embeddings, Llama 3's rope scaling, Llama's attention_bias, bf16 and fp16 weights, shards, Mistral's sliding
window, transformers 5's rope_parameters) on the reference and numpy backends, and a few on every OpenCL device;
then generation's stops, plans and memory."""

import json
import shutil

import numpy as np
import pytest

import kuiper
from conftest import OPENCL_DEVICES
from kuiper.core.errors import ConfigError, InputError, MemoryLimitError
from llm_tools import reference_logits, write_checkpoint

PROMPT = "Once upon a time there was"
VARIANTS = {
    "llama_gqa": {},
    "one_kv_head": dict(num_key_value_heads=1, head_dim=16),
    "qwen2_tied": dict(model_type="qwen2", tie_word_embeddings=True),
    "llama3_scaling_bias": dict(rope_theta=500000.0, attention_bias=True, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8)),
    "bf16": dict(dtype="bf16"),
    "f16_sharded": dict(dtype="f16", shards=3),
    "mistral_window": dict(model_type="mistral", sliding_window=24, num_key_value_heads=4),
    "rope_parameters": dict(rope_theta=None, rope_parameters=dict(rope_type="linear", factor=2.0, rope_theta=1000.0)),
}
BACKENDS = [("reference", None), ("numpy", None)]
OPENCL = [("opencl", spec) for spec in OPENCL_DEVICES]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{variant: (directory, config, weights as the files hold them)}, made once."""
    made = {}
    for name, options in VARIANTS.items():
        directory = tmp_path_factory.mktemp("llm") / name
        config, weights = write_checkpoint(directory, seed=len(made), **options)
        made[name] = (directory, config, weights)
    return made


def greedy_reference(config, weights, ids, steps):
    """The greedy tokens and the logits that chose them, each from the whole sequence so far (no cache)."""
    ids, chosen, rows = list(ids), [], []
    for _ in range(steps):
        row = reference_logits(config, weights, ids)[-1]
        chosen.append(int(np.argmax(row)))
        rows.append(row)
        ids.append(chosen[-1])
    return chosen, np.array(rows)


def assert_close_to_largest(got, expected, rtol=1e-4):
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=0, atol=rtol * scale)


def check_against_reference(directory, config, weights, backend, device, steps=5):
    lm = kuiper.llm.load(directory, backend=backend, device=device)
    ids = lm.tokenizer.encode(PROMPT)
    logits = lm.logits(ids)
    assert logits.shape == (len(ids), config["vocab_size"]) and logits.dtype == np.float32
    assert_close_to_largest(logits, reference_logits(config, weights, ids))
    chosen, rows = greedy_reference(config, weights, ids, steps)
    assert lm.generate(ids, max_new_tokens=steps) == chosen
    lm.logits(ids)  # prefill again, then each decode step through the cache
    for step, token in enumerate(chosen[:-1]):
        assert_close_to_largest(lm.forward([token], len(ids) + step)[0], rows[step + 1])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend, device", BACKENDS)
def test_logits_and_greedy_tokens_match_the_reference_decoder(checkpoints, variant, backend, device):
    check_against_reference(*checkpoints[variant], backend, device)


@pytest.mark.filterwarnings("ignore:.*no OpenCL forward")  # until the layers have OpenCL forwards of their own
@pytest.mark.parametrize("variant", ["llama_gqa", "qwen2_tied", "bf16"])
@pytest.mark.parametrize("backend, device", OPENCL or [pytest.param("opencl", None, marks=pytest.mark.skip(
    "no usable OpenCL device"))])
def test_logits_and_greedy_tokens_on_every_opencl_device(checkpoints, variant, backend, device):
    check_against_reference(*checkpoints[variant], backend, device)


def test_the_config_shapes_the_graph(checkpoints):
    lm = kuiper.llm.load(checkpoints["mistral_window"][0], backend="numpy")
    assert lm.context == 24  # the sliding window bounds what attention sees, and so the cache
    attention = lm.attention[0]
    assert (attention.num_heads, attention.num_kv_heads, attention.max_positions) == (4, 4, 24)
    lm = kuiper.llm.load(checkpoints["qwen2_tied"][0], context=16, backend="numpy")
    assert lm.context == 16 and "lm_head.weight" in lm.weights.aliases
    written = kuiper.pnnx.parse_param("decoder.pnnx.param", lm.param_text).operators  # in the order written
    block = [op.type for op in written if op.name.startswith("model.layers.0.")]
    assert block == ["nn.RMSNorm", "nn.Linear", "Tensor.reshape", "Tensor.permute", "nn.Linear", "Tensor.reshape",
                     "Tensor.permute", "nn.Linear", "Tensor.reshape", "Tensor.permute", "kuiper.RotaryEmbedding",
                     "kuiper.RotaryEmbedding", "kuiper.CachedAttention", "Tensor.permute", "Tensor.reshape",
                     "nn.Linear", "pnnx.Expression", "nn.RMSNorm", "nn.Linear", "nn.Linear", "F.silu",
                     "pnnx.Expression", "nn.Linear", "pnnx.Expression"]
    assert lm.param_text.startswith("7767517\n")
    assert lm.parameters == sum(w.size for w in checkpoints["qwen2_tied"][2].values())


def test_prefill_and_decode_keep_a_plan_each(checkpoints):
    lm = kuiper.llm.load(checkpoints["llama_gqa"][0], backend="numpy")
    ids = lm.tokenizer.encode(PROMPT)
    lm.generate(ids, max_new_tokens=6)
    shapes = {tuple(shape for shape, _ in key) for key in lm.graph.plans}
    assert shapes == {((1, len(ids)), (len(ids),)), ((1, 1), (1,))}
    timings = lm.last_timings
    assert timings.prefill_tokens == len(ids) and timings.decode_tokens == 5
    assert timings.prefill_rate > 0 and timings.decode_rate > 0


def test_generation_stops_at_eos_and_at_the_end_of_the_context(checkpoints):
    directory, config, weights = checkpoints["llama_gqa"]
    lm = kuiper.llm.load(directory, context=14, backend="numpy")
    ids = lm.tokenizer.encode(PROMPT)[:7]
    first = lm.generate(ids, max_new_tokens=20)
    assert len(first) == 14 - 7 + 1  # the last token is chosen from the logits at the context's last position
    assert lm.generate(ids, max_new_tokens=3) == first[:3]
    assert lm.generate(ids, max_new_tokens=0) == []
    lm.eos_token_ids = frozenset({first[2]})
    assert lm.generate(ids, max_new_tokens=10) == first[:2]  # the end-of-sequence token is not returned


def test_generation_config_eos_takes_precedence(checkpoints, tmp_path):
    directory, _, _ = checkpoints["llama_gqa"]
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9]}))
    assert kuiper.llm.load(tmp_path, backend="numpy").eos_token_ids == {7, 9}
    eos = json.loads((directory / "config.json").read_text())["eos_token_id"]
    assert kuiper.llm.load(directory, backend="numpy").eos_token_ids == {eos}


def test_a_prompt_longer_than_the_context_is_refused(checkpoints):
    lm = kuiper.llm.load(checkpoints["llama_gqa"][0], context=4, backend="numpy")
    ids = lm.tokenizer.encode(PROMPT)[:7]
    with pytest.raises(InputError, match=r"the prompt has 7 tokens, more than the 4 positions of the context"):
        lm.logits(ids)
    with pytest.raises(InputError, match="the prompt has 7 tokens"):
        lm.generate(ids)
    with pytest.raises(InputError, match="no tokens"):
        lm.generate([])
    # what is not token ids: text, floats (which int() would cut), a number; numpy's integers are ids
    with pytest.raises(InputError, match=r"the prompt is text: give its token ids \(tokenizer.encode\(text\)\)"):
        lm.generate("Once upon")
    for bad in ([3, 1.5], 7):
        with pytest.raises(InputError, match="the prompt must be token ids, whole numbers"):
            lm.generate(bad)
        with pytest.raises(InputError, match="the prompt must be token ids, whole numbers"):
            lm.stream(bad)
    assert lm.generate(np.array(ids[:2]), 3) == lm.generate(ids[:2], 3)


@pytest.mark.parametrize("backend, device", BACKENDS + OPENCL)
def test_a_token_id_past_the_vocabulary_is_refused_before_the_forward(checkpoints, backend, device):
    """The model checks its ids on the host (OpenCL's embedding then replays): the reference layer's error, and
    the cache keeps what it held."""
    lm = kuiper.llm.load(checkpoints["llama_gqa"][0], backend=backend, device=device)
    vocab = lm.config.vocab_size
    ids = lm.tokenizer.encode(PROMPT)
    first = lm.logits(ids)
    for bad in (vocab, -1):
        with pytest.raises(InputError, match=f"nn.Embedding operator 'model.embed_tokens': id {bad} is out of "
                                             f"range: the table has {vocab} rows"):
            lm.forward([ids[0], bad], len(ids))
    assert lm.sequence.length == len(ids)
    np.testing.assert_allclose(lm.forward(ids[-1:], len(ids) - 1), first[-1:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("options, message", [
    (dict(temperature=-1.0), "temperature=-1.0"), (dict(top_k=-2), "top_k=-2"), (dict(top_p=0.0), "top_p=0.0"),
    (dict(top_p=1.5), "top_p=1.5"), (dict(max_new_tokens=-1), "max_new_tokens=-1"),
])
def test_bad_options_are_one_line_errors(checkpoints, options, message):
    lm = kuiper.llm.load(checkpoints["llama_gqa"][0], backend="numpy")
    with pytest.raises(ConfigError, match=message):
        lm.generate([1, 2, 3], **options)


def test_bad_load_options(checkpoints):
    directory = checkpoints["llama_gqa"][0]
    with pytest.raises(ConfigError, match=r"context=65: give a whole number from 1 to 64 .*max_position_embeddings"):
        kuiper.llm.load(directory, context=65, backend="numpy")
    with pytest.raises(ConfigError, match="precision fp16 needs the opencl backend"):
        kuiper.llm.load(directory, precision="fp16", backend="numpy")
    with pytest.raises(kuiper.BackendError, match="unknown backend 'gpu'"):
        kuiper.llm.load(directory, backend="gpu")


def test_memory_is_checked_before_anything_is_allocated(checkpoints):
    with pytest.raises(MemoryLimitError, match=r"config.json: the weights in float32 .* and a KV cache of 64 positions "
                                               r".* over the memory limit of 64.0 KiB"):
        kuiper.llm.load(checkpoints["llama_gqa"][0], context=64, memory_limit="64K", backend="numpy")
