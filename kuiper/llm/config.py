"""config.json: what a Hugging Face checkpoint says about its architecture, read and checked.

One decoder family covers Llama (Llama 2, Llama 3.x, TinyLlama, SmolLM), Qwen2 (Qwen2, Qwen2.5), Mistral, Qwen3 and
SmolLM3:
token embedding, `num_hidden_layers` blocks of (RMSNorm, grouped-query attention with rotary positions, RMSNorm,
SwiGLU MLP), each wrapped in a residual sum, then a final RMSNorm and the vocabulary projection (lm_head). They
differ only in details, which config.json spells out:

* sizes: hidden_size, intermediate_size (the MLP's), num_attention_heads, num_key_value_heads (fewer: GQA;
  default num_attention_heads), head_dim (default hidden_size / num_attention_heads), vocab_size;
* rms_norm_eps; the rotary embedding's rope_theta and rope_scaling ({"rope_type": "llama3", "factor": ...});
  transformers 5 writes both as one `rope_parameters` dict, older files as two keys;
* biases: Qwen2 has them on q, k and v always; Llama and SmolLM3 where `attention_bias` (q, k, v and o) and
  `mlp_bias` say, Qwen3 where `attention_bias` says;
* SmolLM3 leaves the rotation out of some layers (NoPE: `no_rope_layers`, a 0 for each such layer, by default
  every fourth);
* Qwen3 normalizes each head's queries and keys (an RMSNorm over head_dim, `q_norm` and `k_norm`) before
  the rotation;
* tie_word_embeddings: lm_head reuses the embedding's matrix (no lm_head.weight in the file);
* max_position_embeddings; a sliding_window (Mistral 7B v0.1, Qwen2 with use_sliding_window) limits how far back
  attention looks, which kuiper honours by holding at most that many positions;
* bos_token_id and eos_token_id (an int, a list, or null).

Every problem is a CheckpointError naming config.json and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kuiper.core.errors import CheckpointError

#: model_type -> whether q, k and v always have biases
MODEL_TYPES = {"llama": False, "qwen2": True, "mistral": False, "qwen3": False, "smollm3": False}
#: the model types whose `attention_bias` gives q, k, v and o biases, and those whose `mlp_bias` gives the MLP's
ATTENTION_BIAS = ("llama", "qwen3", "smollm3")
MLP_BIAS = ("llama", "smollm3")
#: the model types that normalize each head's queries and keys before the rotation
QK_NORM = ("qwen3",)
ROPE_TYPES = ("default", "linear", "llama3")
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict = field(default_factory=dict)  # rope_type and its factors; {} for none
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    rope_layers: tuple = ()  # per layer, whether its q and k are rotated; () for every layer
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple = ()
    path: str = "config.json"

    def rotated(self, layer: int) -> bool:
        """Whether layer `layer` rotates its queries and keys."""
        return not self.rope_layers or self.rope_layers[layer]

    @property
    def rope_type(self) -> str:
        return self.rope_scaling.get("rope_type", "default")

    def kv_cache_bytes_per_token(self, itemsize: int = 4) -> int:
        """Keys and values of every layer for one position."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * itemsize


def read_config(directory) -> ModelConfig:
    path = Path(directory) / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not found (a Hugging Face model directory has config.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return parse_config(raw, str(path))


def parse_config(raw: dict, path: str = "config.json") -> ModelConfig:
    keys = _Keys(raw, path)
    model_type = raw.get("model_type")
    if model_type not in MODEL_TYPES:
        raise CheckpointError(f"{path}: model_type {model_type!r} is not supported "
                              f"(supported: {', '.join(MODEL_TYPES)})")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{path}: hidden_act {act!r} is not supported (the SwiGLU MLP of this family uses silu)")
    hidden, heads = keys.positive("hidden_size"), keys.positive("num_attention_heads")
    kv_heads = keys.positive("num_key_value_heads", heads)
    if heads % kv_heads:
        raise CheckpointError(f"{path}: num_attention_heads={heads} is not a multiple of "
                              f"num_key_value_heads={kv_heads}")
    head_dim = keys.positive("head_dim", None)
    if head_dim is None:
        if hidden % heads:
            raise CheckpointError(f"{path}: hidden_size={hidden} is not a multiple of num_attention_heads={heads} "
                                  f"(and no head_dim is given)")
        head_dim = hidden // heads
    if head_dim % 2:
        raise CheckpointError(f"{path}: head_dim={head_dim} must be even (rotary embeddings turn pairs)")
    theta, scaling = _rope(raw, keys, path)
    attention_bias = model_type in ATTENTION_BIAS and keys.flag("attention_bias")
    qkv_bias = MODEL_TYPES[model_type] or attention_bias
    window = None
    if model_type == "mistral" or keys.flag("use_sliding_window"):
        window = keys.positive("sliding_window", None)
    return ModelConfig(
        model_type=model_type, hidden_size=hidden, intermediate_size=keys.positive("intermediate_size"),
        num_hidden_layers=keys.positive("num_hidden_layers"), num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, vocab_size=keys.positive("vocab_size"),
        max_position_embeddings=keys.positive("max_position_embeddings"),
        rms_norm_eps=keys.number("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
        qkv_bias=qkv_bias, o_bias=attention_bias, qk_norm=model_type in QK_NORM,
        mlp_bias=model_type in MLP_BIAS and keys.flag("mlp_bias"), tie_word_embeddings=keys.flag("tie_word_embeddings"),
        rope_layers=_rope_layers(raw, keys, path) if model_type == "smollm3" else (),
        sliding_window=window, bos_token_id=next(iter(keys.token_ids("bos_token_id")), None),
        eos_token_ids=keys.token_ids("eos_token_id"), path=path,
    )


def _rope_layers(raw: dict, keys: "_Keys", path: str) -> tuple:
    """SmolLM3's layers that rotate: `no_rope_layers` (1: rotated, 0: not, a value a layer), else every layer but
    each `no_rope_layer_interval`-th (default 4), as transformers fills it in."""
    layers = keys.positive("num_hidden_layers")
    flags = raw.get("no_rope_layers")
    if flags is None:
        interval = keys.positive("no_rope_layer_interval", 4)
        return tuple((i + 1) % interval != 0 for i in range(layers))
    if not isinstance(flags, list) or len(flags) != layers or not all(type(f) is int and f in (0, 1) for f in flags):
        raise CheckpointError(f"{path}: no_rope_layers must be a list of {layers} values 0 or 1, got {flags!r}")
    return tuple(bool(f) for f in flags)


def _rope(raw: dict, keys: "_Keys", path: str) -> tuple:
    """(rope_theta, scaling dict) from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling`."""
    params = raw.get("rope_parameters")
    name = "rope_parameters" if params is not None else "rope_scaling"
    if params is None:
        params = raw.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise CheckpointError(f"{path}: {name} must be an object, got {params!r}")
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 1:
        raise CheckpointError(f"{path}: rope_theta must be a number > 1, got {theta!r}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(f"{path}: {name}.rope_type {rope_type!r} is not supported "
                              f"(supported: {', '.join(ROPE_TYPES)})")
    scaling = {}
    if rope_type != "default":
        scaling["rope_type"] = rope_type
        for key in ("factor",) if rope_type == "linear" else LLAMA3_KEYS:
            value = params.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise CheckpointError(f"{path}: {name}.{key} must be a positive number, got {value!r}")
            scaling[key] = int(value) if key == "original_max_position_embeddings" else float(value)
    return float(theta), scaling


class _Keys:
    """Typed reads of config.json's keys, each failure naming the file and the key."""

    def __init__(self, raw: dict, path: str):
        self.raw, self.path = raw, path

    def _get(self, key, default):
        value = self.raw.get(key)
        return default if value is None else value

    def positive(self, key: str, default=...):
        value = self._get(key, default)
        if value is ...:
            raise CheckpointError(f"{self.path}: missing key {key!r}")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{self.path}: {key} must be a whole number >= 1, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise CheckpointError(f"{self.path}: {key} must be a number >= 0, got {value!r}")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self._get(key, False)
        if not isinstance(value, bool):
            raise CheckpointError(f"{self.path}: {key} must be true or false, got {value!r}")
        return value

    def token_ids(self, key: str) -> tuple:
        """An id, a list of ids, or none: always a tuple."""
        value = self._get(key, [])
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise CheckpointError(f"{self.path}: {key} must be a token id or a list of them, got {value!r}")
        return tuple(values)


def generation_eos(directory) -> tuple | None:
    """The end-of-sequence ids of generation_config.json, which take precedence over config.json's (Llama 3's
    instruct models stop at <|eot_id|> too); None when the file or the key is absent."""
    path = Path(directory) / "generation_config.json"
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get("eos_token_id") is None:
        return None
    return _Keys(raw, str(path)).token_ids("eos_token_id")
