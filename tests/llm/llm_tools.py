"""Tiny checkpoints for the tests, made here with numpy and `tokenizers` (no torch), and a decoder written
directly in numpy, a plain loop over layers, heads and positions, as the independent reference.

A checkpoint is what Hugging Face saves: config.json, model.safetensors (or shards and their index),
tokenizer.json and tokenizer_config.json. The weights are random, scaled so that the logits stay near 1.
"""

from __future__ import annotations

import cmath
import json
import math
import struct
from pathlib import Path

import numpy as np

BOS, EOS = "<s>", "</s>"
CORPUS = [
    "Once upon a time there was a little robot who loved to read.",
    "The robot read every book in the library, from the first shelf to the last.",
    "Naïve café owners serve crème brûlée; the robot prefers 日本語 and emoji 🤖🚀.",
    "Whitespace matters:  two spaces,\ttabs, and new\nlines.",
    "It was the best of times, it was the worst of times.",
]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def train_tokenizer(vocab_size: int = 320):
    """A byte-level BPE tokenizer trained on CORPUS, BOS added before each text, special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return tok


# ---- safetensors, written by hand (numpy has no bfloat16 for the package's writer) ---------------------------------
def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def stored(values: np.ndarray, dtype: str) -> tuple:
    """(safetensors dtype, raw bytes, the float values the file then holds)."""
    if dtype == "bf16":
        bits = to_bf16_bits(values)
        return "BF16", bits.tobytes(), from_bf16_bits(bits)
    if dtype == "f16":
        half = values.astype(np.float16)
        return "F16", half.tobytes(), half.astype(np.float32)
    return "F32", values.astype(np.float32).tobytes(), values.astype(np.float32)


def write_safetensors(path: Path, tensors: dict) -> None:
    """tensors: {name: (safetensors dtype, shape, raw bytes)}."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- a checkpoint --------------------------------------------------------------------------------------------------
def random_weights(config: dict, rng) -> dict:
    """{tensor name: float32 array} for a config of the Llama family."""
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    dim = config.get("head_dim") or hidden // heads
    qkv_bias = config["model_type"] == "qwen2" or config.get("attention_bias", False)

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)

    def norm():
        return (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)

    weights = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32)}
    for i in range(config["num_hidden_layers"]):
        block = f"model.layers.{i}"
        shapes = {"self_attn.q_proj": (heads * dim, hidden), "self_attn.k_proj": (kv_heads * dim, hidden),
                  "self_attn.v_proj": (kv_heads * dim, hidden), "self_attn.o_proj": (hidden, heads * dim),
                  "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden), "mlp.down_proj": (hidden, inter)}
        weights[f"{block}.input_layernorm.weight"] = norm()
        weights[f"{block}.post_attention_layernorm.weight"] = norm()
        for name, shape in shapes.items():
            weights[f"{block}.{name}.weight"] = matrix(*shape)
            if qkv_bias and name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj") or \
                    config.get("attention_bias") and name == "self_attn.o_proj":
                weights[f"{block}.{name}.bias"] = (0.1 * rng.standard_normal(shape[0])).astype(np.float32)
    weights["model.norm.weight"] = norm()
    if not config.get("tie_word_embeddings"):
        weights["lm_head.weight"] = matrix(vocab, hidden)
    return weights


def write_checkpoint(directory: Path, tokenizer=None, dtype: str = "f32", shards: int = 1, seed: int = 0,
                     chat_template: bool = False, **overrides) -> tuple:
    """Write a tiny checkpoint; returns (config dict, {name: the float32 values the files hold})."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer or train_tokenizer()
    config = dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=tokenizer.get_vocab_size() + 3,
                  max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  bos_token_id=tokenizer.token_to_id(BOS), eos_token_id=tokenizer.token_to_id(EOS),
                  hidden_act="silu")
    config.update(overrides)
    weights = random_weights(config, np.random.default_rng(seed))
    held, tensors = {}, {}
    for name, values in weights.items():
        kind, raw, held[name] = stored(values, dtype)
        tensors[name] = (kind, values.shape, raw)
    if shards == 1:
        write_safetensors(directory / "model.safetensors", tensors)
    else:
        names = list(tensors)
        parts = [names[i::shards] for i in range(shards)]
        weight_map = {}
        for k, part in enumerate(parts, start=1):
            file = f"model-{k:05d}-of-{shards:05d}.safetensors"
            write_safetensors(directory / file, {name: tensors[name] for name in part})
            weight_map.update({name: file for name in part})
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save(str(directory / "tokenizer.json"))
    settings = dict(bos_token=BOS, eos_token=EOS, clean_up_tokenization_spaces=False)
    if chat_template:
        settings["chat_template"] = CHAT_TEMPLATE
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))
    return config, held


# ---- the reference decoder ------------------------------------------------------------------------------------------
def llama3_frequency(i, dim, theta, factor, low, high, original):
    """One inverse frequency under Llama 3's scaling: short wavelengths kept, long ones divided, blended between."""
    frequency = theta ** (-2 * i / dim)
    wavelength = 2 * math.pi / frequency
    if wavelength < original / high:
        return frequency
    if wavelength > original / low:
        return frequency / factor
    keep = (original / wavelength - low) / (high - low)
    return (1 - keep) * frequency / factor + keep * frequency


def frequencies(config: dict, dim: int) -> list:
    scaling = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = scaling.get("rope_theta", config.get("rope_theta", 10000.0))
    if scaling.get("rope_type") == "llama3":
        return [llama3_frequency(i, dim, theta, scaling["factor"], scaling["low_freq_factor"],
                                 scaling["high_freq_factor"], scaling["original_max_position_embeddings"])
                for i in range(dim // 2)]
    return [theta ** (-2 * i / dim) / scaling.get("factor", 1.0) for i in range(dim // 2)]


def reference_logits(config: dict, weights: dict, ids: list) -> np.ndarray:
    """(len(ids), vocab) float64, the whole sequence at once, causal attention written out per head and position."""
    w = {name: values.astype(np.float64) for name, values in weights.items()}
    hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    dim = config.get("head_dim") or hidden // heads
    eps, n = config["rms_norm_eps"], len(ids)
    inv_freq = frequencies(config, dim)

    def rms(x, weight):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight

    def project(x, name):
        y = x @ w[f"{name}.weight"].T
        return y + w[f"{name}.bias"] if f"{name}.bias" in w else y

    def rotate(vectors):  # (n, heads, dim): pair (i, i + dim/2) turned as a complex number
        out = vectors.copy()
        for p, h, i in np.ndindex(n, vectors.shape[1], dim // 2):
            z = complex(vectors[p, h, i], vectors[p, h, i + dim // 2]) * cmath.exp(1j * p * inv_freq[i])
            out[p, h, i], out[p, h, i + dim // 2] = z.real, z.imag
        return out

    x = w["model.embed_tokens.weight"][ids]
    for layer in range(config["num_hidden_layers"]):
        block = f"model.layers.{layer}"
        h = rms(x, w[f"{block}.input_layernorm.weight"])
        q = rotate(project(h, f"{block}.self_attn.q_proj").reshape(n, heads, dim))
        k = rotate(project(h, f"{block}.self_attn.k_proj").reshape(n, kv_heads, dim))
        v = project(h, f"{block}.self_attn.v_proj").reshape(n, kv_heads, dim)
        attended = np.zeros((n, heads, dim))
        for head in range(heads):
            kv = head // (heads // kv_heads)
            for i in range(n):
                scores = np.array([q[i, head] @ k[j, kv] for j in range(i + 1)]) / math.sqrt(dim)
                weights_ = np.exp(scores - scores.max())
                attended[i, head] = (weights_ / weights_.sum()) @ v[:i + 1, kv]
        x = x + project(attended.reshape(n, heads * dim), f"{block}.self_attn.o_proj")
        h = rms(x, w[f"{block}.post_attention_layernorm.weight"])
        gate, up = project(h, f"{block}.mlp.gate_proj"), project(h, f"{block}.mlp.up_proj")
        x = x + project(gate / (1 + np.exp(-gate)) * up, f"{block}.mlp.down_proj")
    x = rms(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T
