"""Malformed checkpoint directories fail cleanly: one line, a CheckpointError naming the file and the key or
tensor, raised before the graph is built. A test per case."""

import json
import shutil

import numpy as np
import pytest

import kuiper
from kuiper.core.errors import CheckpointError, KuiperError
from kuiper.llm.config import parse_config
from llm_tools import train_tokenizer, write_checkpoint


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    directory = tmp_path_factory.mktemp("good") / "model"
    write_checkpoint(directory, tokenizer=train_tokenizer())
    sharded = tmp_path_factory.mktemp("good") / "sharded"
    write_checkpoint(sharded, shards=2)
    return directory, sharded


@pytest.fixture
def model(good, tmp_path):
    """A fresh copy of the good checkpoint to break."""
    return shutil.copytree(good[0], tmp_path / "model")


@pytest.fixture
def sharded(good, tmp_path):
    return shutil.copytree(good[1], tmp_path / "sharded")


def edit_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is ...]:
        del config[key]
    path.write_text(json.dumps(config))


def fails(directory, pattern):
    with pytest.raises(CheckpointError, match=pattern) as caught:
        kuiper.llm.load(directory, backend="numpy")
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_good_checkpoints_load(good):
    for directory in good:
        assert kuiper.llm.load(directory, backend="numpy").generate([0, 5, 9], max_new_tokens=2)


def test_not_a_directory(tmp_path):
    fails(tmp_path / "nowhere", "nowhere: not a directory")


def test_missing_config_json(model):
    (model / "config.json").unlink()
    fails(model, r"config.json: not found")


def test_config_json_that_is_not_json(model):
    (model / "config.json").write_text("{'model_type': llama")
    fails(model, r"config.json: not readable JSON")


def test_unknown_model_type(model):
    edit_config(model, model_type="gpt2")
    fails(model, r"config.json: model_type 'gpt2' is not supported "
                 r"\(supported: llama, qwen2, mistral, qwen3, smollm3\)")


@pytest.mark.parametrize("changes, pattern", [
    (dict(hidden_size=...), "missing key 'hidden_size'"),
    (dict(num_attention_heads=0), "num_attention_heads must be a whole number >= 1, got 0"),
    (dict(num_key_value_heads=3), "num_attention_heads=4 is not a multiple of num_key_value_heads=3"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), r"rope_scaling.rope_type 'yarn' is not supported"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), r"rope_scaling.low_freq_factor must be a positive"),
    (dict(eos_token_id="</s>"), "eos_token_id must be a token id or a list of them"),
    (dict(tie_word_embeddings="yes"), "tie_word_embeddings must be true or false"),
    (dict(head_dim=7), "head_dim=7 must be even"),
    (dict(model_type="smollm3", no_rope_layers=[1, 1, 0]), r"no_rope_layers must be a list of 2 values 0 or 1, got "
                                                           r"\[1, 1, 0\]"),
    (dict(model_type="smollm3", no_rope_layers=[1, 0.5]), r"no_rope_layers must be a list of 2 values 0 or 1"),
])
def test_inconsistent_config_keys(model, changes, pattern):
    edit_config(model, **changes)
    fails(model, "config.json: " + pattern)


def test_missing_tensor(model):
    tensors = dict(kuiper.llm.weights.CheckpointWeights(model).tensors)
    rewrite_without(model, "model.layers.1.mlp.up_proj.weight")
    assert "model.layers.1.mlp.up_proj.weight" in tensors
    fails(model, r"tensor model.layers.1.mlp.up_proj.weight is missing from the checkpoint \(model.safetensors\)")


def test_missing_lm_head_when_not_tied(model):
    rewrite_without(model, "lm_head.weight")
    fails(model, "tensor lm_head.weight is missing")
    edit_config(model, tie_word_embeddings=True)  # tied, the embedding serves: it loads
    assert kuiper.llm.load(model, backend="numpy").config.tie_word_embeddings


def test_tensor_of_the_wrong_shape(model):
    edit_config(model, intermediate_size=40)
    fails(model, r"model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape \[48, 32\], config.json "
                 r"makes it \[40, 32\]")


def test_unsupported_dtype(model, tmp_path):
    from llm_tools import write_safetensors

    weights = kuiper.llm.weights.CheckpointWeights(model)
    tensors = {}
    for name, entry in weights.tensors.items():
        values = weights.view(name, entry.dtype, entry.shape).astype(np.float64 if name == "model.norm.weight" else
                                                                     np.float32)
        tensors[name] = ("F64" if values.dtype == np.float64 else "F32", values.shape, values.tobytes())
    write_safetensors(model / "model.safetensors", tensors)
    fails(model, r"model.safetensors: tensor model.norm.weight has dtype F64; kuiper reads F32, F16, BF16")


def test_missing_weights_file(model):
    (model / "model.safetensors").unlink()
    fails(model, r"no model.safetensors or model.safetensors.index.json")


def test_missing_shard(sharded):
    (sharded / "model-00002-of-00002.safetensors").unlink()
    fails(sharded, r"model.safetensors.index.json: shard model-00002-of-00002.safetensors is missing \(it holds "
                   r"model\.\S+ and \d+ more\)")


def test_index_naming_a_tensor_its_shard_lacks(sharded):
    index = sharded / "model.safetensors.index.json"
    content = json.loads(index.read_text())
    content["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors" if content["weight_map"][
        "model.norm.weight"].startswith("model-00002") else "model-00002-of-00002.safetensors"
    index.write_text(json.dumps(content))
    fails(sharded, r"tensor model.norm.weight is not in this shard, though model.safetensors.index.json says it is")


def test_unreadable_index(sharded):
    (sharded / "model.safetensors.index.json").write_text('{"metadata": {}}')
    fails(sharded, r"model.safetensors.index.json: not a readable index \(KeyError")


@pytest.mark.parametrize("cut", [4, 100, 1000])
def test_truncated_safetensors_file(model, cut):
    path = model / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-cut] if cut < 1000 else data[:cut])
    fails(model, r"model.safetensors: not a readable safetensors file")


def test_missing_tokenizer_json(model):
    (model / "tokenizer.json").unlink()
    fails(model, r"tokenizer.json: not found")


def test_bad_tokenizer_json(model):
    (model / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    fails(model, r"tokenizer.json: not a readable tokenizer")


def test_tokenizer_larger_than_the_embedding(tmp_path):
    write_checkpoint(tmp_path / "small", vocab_size=100)  # the tokenizer has 320 tokens
    fails(tmp_path / "small", r"tokenizer.json: 320 tokens, more than the model's vocab_size of 100 \(\S+config.json\)")


def test_prompt_too_long(model):
    lm = kuiper.llm.load(model, context=8, backend="numpy")
    with pytest.raises(KuiperError, match=r"the prompt has 9 tokens, more than the 8 positions of the context"):
        lm.generate(list(range(9)))


def test_every_checkpoint_error_is_a_kuiper_error_and_a_value_error():
    with pytest.raises(KuiperError):
        parse_config({"model_type": "bert"})
    assert issubclass(CheckpointError, ValueError)


def rewrite_without(directory, name):
    """model.safetensors again, without tensor `name`."""
    from llm_tools import write_safetensors

    weights = kuiper.llm.weights.CheckpointWeights(directory)
    kinds = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
    tensors = {n: (kinds[e.dtype], e.shape, weights.view(n, e.dtype, e.shape).tobytes())
               for n, e in weights.tensors.items() if n != name}
    del weights
    write_safetensors(directory / "model.safetensors", tensors)
