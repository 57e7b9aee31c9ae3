"""Make the tiny language-model checkpoints and transformers' reference outputs that the tests read.

    python tools/make_llm_checkpoints.py [--out models/llm] [--only NAME ...]

Needs torch, transformers, tokenizers, safetensors and jinja2 (the committed files were made with
`pip install torch==2.13.0 transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 jinja2`, torch's
CPU build); the test suite needs none of them, it reads what this writes.

Every checkpoint is built with transformers' own model class from a fixed seed, its weights drawn at
a larger scale than transformers' initialiser so that the logits are spread out (the weights are
random: the text they produce means nothing), saved with `save_pretrained`, then loaded back from
disk in float32 with eager attention, and that loaded model makes the references.

OUT/NAME/                   a Hugging Face checkpoint directory (config.json, generation_config.json,
                            model.safetensors or shards with model.safetensors.index.json, tokenizer.json,
                            tokenizer_config.json, for qwen2 chat_template.jinja)
OUT/NAME/reference.npz      prompt_ids      int64 (P,)     the prompt, BOS first
                            prefill_logits  float32 (P, V) one forward over the prompt
                            greedy_ids      int64 (N,)     the N new tokens of greedy generation
                            decode_logits   float32 (N, V) row i: the logits that chose greedy_ids[i],
                                            i.e. the last position after prompt + greedy_ids[:i]; row 0
                                            comes from the prefill, the others from decode steps that
                                            feed one token against the KV cache
OUT/tokenizer_reference.json  transformers' encodings and decodings of test strings, and the chat
                            template's output (one tokenizer serves every checkpoint)
OUT/manifest.json           the checkpoints, what each covers, the prompt and the versions used

A seed is kept only if greedy decoding never has to break a near tie: at every step the top logit
beats the second by at least MIN_MARGIN and is not EOS, so generation runs all N steps.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import llm_tokenizer

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 384
PROMPT = "The quick brown fox"
NEW_TOKENS = 8
MIN_MARGIN = 0.02
WEIGHT_STD = 0.25
SIZE_LIMIT = 300 * 1024

# Text the tiny tokenizer learns its merges from: English prose, code, numbers, other scripts, emoji.
TOKENIZER_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away into the woods.
A small language model reads one token at a time and predicts the next one from everything before it.
Attention lets every position look back at the positions before it, and the cache keeps their keys and values.
It's a fine day, isn't it? We'll see what they've done, and I'd say you're right: she'll come, he'd go.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 255 1024 2048 65536 3.14159 2.71828 -17 +5 1,000,000 12:30 2024-05-01.
def forward(self, x):
    h = self.norm(x)
    return x + self.attn(h, cache=None)  # residual connection

for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
{"name": "kuiper", "layers": [1, 2, 3], "ok": true}
Café, naïve, résumé, façade, jalapeño, Zürich, Ångström, crème brûlée, déjà vu, piñata, São Paulo.
Grüße aus Köln! Schöne Straße, größer, Mädchen. ¿Qué tal? ¡Muy bien! Ça va, l'été est là.
Привет, мир! Как дела? Хорошо, спасибо. Москва, Санкт-Петербург.
Γειά σου κόσμε. Αθήνα, θάλασσα, ουρανός.
日本語のテキストです。東京は大きな都市です。こんにちは、世界。
中文文本。你好，世界！今天天气很好。我们一起学习。
한국어 텍스트입니다. 안녕하세요, 세계!
مرحبا بالعالم. كيف حالك؟
שלום עולם
नमस्ते दुनिया
Emoji: 😀 😃 😄 😁 😂 🤣 😊 🙂 🎉 🎈 🚀 🌍 🌟 ❤️ 👍 👍🏽 👋🏻 🇫🇷 🇯🇵 🇺🇸 👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 ✨ 🔥 💯
Whitespace:  two  spaces,   three   spaces,\tone tab,\t\ttwo tabs,
a blank line follows

and a line with trailing spaces   
Quotes “curly” and ‘single’, dashes – and —, ellipsis… bullets • and arrows → ← ↑ ↓, maths ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ×.
"""

TEST_STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "a",
    " leading space",
    "trailing space ",
    "multiple   spaces   inside",
    "  \t \n  ",
    "line one\nline two\n\nline four\n",
    "tab\tseparated\tvalues",
    "windows\r\nline endings\r\n",
    "Café naïve résumé façade",
    "cafe\u0301 with a combining accent",
    "Grüße aus Köln, ¿qué tal? Ça va!",
    "日本語のテキスト、中文文本。",
    "한국어 텍스트",
    "Привет, мир!",
    "مرحبا بالعالم",
    "emoji 😀🎉🚀",
    "family 👨‍👩‍👧‍👦, thumbs 👍🏽, flag 🇫🇷, rainbow flag 🏳️‍🌈",
    "numbers 1234567 3.14159 1,000,000",
    "don't won't I'm we'll they've she'd IT'S",
    "def f(x):\n    return x ** 2  # square\n",
    "ℌ𝔢𝔩𝔩𝔬 ﬁne ①",
    "<|im_start|>user\nHi there<|im_end|>\n",
]

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France? 🇫🇷"},
]


@dataclass
class Spec:
    name: str
    architecture: str  # LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, SmolLM3ForCausalLM
    covers: str
    config: dict
    dtype: torch.dtype = torch.float32
    max_shard_size: str | None = None
    legacy_config: bool = False  # rope_theta/rope_scaling/torch_dtype keys, as hub checkpoints have
    jinja_file: bool = False
    first_seed: int = 0  # seeds tried: first_seed, first_seed + 1, ... (at most 100); set below


SPECS = [
    Spec("llama_gqa", "LlamaForCausalLM",
         "Llama 2 / TinyLlama shape: grouped-query attention (4 query heads share 2 KV heads), untied "
         "lm_head, fp32, rms_norm_eps 1e-5, transformers 5 config keys (rope_parameters)",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0)),
    Spec("llama_mqa", "LlamaForCausalLM",
         "multi-query attention (one KV head shared by 4 query heads); tied embeddings as SmolLM, "
         "SmolLM2 and Llama 3.2 have them (no lm_head.weight in the file); legacy config keys "
         "(rope_theta at top level, rope_scaling null)",
         dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=1,
              rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=10000.0),
         legacy_config=True),
    Spec("llama3_scaled", "LlamaForCausalLM",
         "Llama 3.x: rope_scaling of type llama3 (factor 8, low/high frequency factors 1 and 4, "
         "original_max_position_embeddings 32, so head_dim 12 gives frequencies in all three bands: "
         "kept, smoothed and divided by 8), q/k/v/o biases (attention_bias), GQA 4/2, tied "
         "embeddings, eos_token_id a list ([<|eos|>, <|im_end|>] as Llama 3.1 Instruct lists several), "
         "legacy config keys (rope_scaling, rope_theta) as Meta's checkpoints have them",
         dict(hidden_size=48, intermediate_size=72, num_attention_heads=4, num_key_value_heads=2,
              head_dim=12, rms_norm_eps=1e-5, tie_word_embeddings=True, attention_bias=True,
              rope_theta=10000.0, eos_token_id=[1, 3],
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
         legacy_config=True),
    Spec("llama_bf16", "LlamaForCausalLM",
         "weights stored as bfloat16 (references from those weights upcast to float32), full "
         "multi-head attention (4 query and 4 KV heads), untied lm_head",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=4,
              rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10000.0),
         dtype=torch.bfloat16),
    Spec("llama_sharded", "LlamaForCausalLM",
         "weights split over several model-0000K-of-0000N.safetensors files listed in "
         "model.safetensors.index.json; GQA 4/2, untied lm_head",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10000.0),
         max_shard_size="70KB"),
    Spec("qwen2", "Qwen2ForCausalLM",
         "Qwen2 / Qwen2.5: biases on q/k/v (none on o), tied embeddings, rope_theta 1e6, GQA 4/2, "
         "use_sliding_window false, legacy config keys, chat template in chat_template.jinja",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0,
              use_sliding_window=False, max_window_layers=2),
         legacy_config=True, jinja_file=True),
    Spec("mistral", "MistralForCausalLM",
         "Mistral: head_dim 16 set explicitly, unlike hidden_size / heads = 8 (so q_proj maps 32 to "
         "64), GQA 4/2, sliding_window null, rope_theta 1e6, untied lm_head, legacy config keys",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=1000000.0,
              sliding_window=None),
         legacy_config=True),
    Spec("qwen3", "Qwen3ForCausalLM",
         "Qwen3: an RMSNorm over each head's queries and keys (q_norm, k_norm) before the rotation, "
         "head_dim 16 set explicitly (q_proj maps 32 to 64), no biases (attention_bias false), tied "
         "embeddings, rope_theta 1e6, GQA 4/2, use_sliding_window false, legacy config keys",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0,
              attention_bias=False, use_sliding_window=False, max_window_layers=2),
         legacy_config=True),
    Spec("smollm3", "SmolLM3ForCausalLM",
         "SmolLM3: no rotation in some layers (NoPE; no_rope_layers [1, 0]: the second layer's q and k are "
         "not rotated), rope_theta 2e6, GQA 4/2, tied embeddings, no biases, transformers 5 config keys",
         dict(hidden_size=32, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=2000000.0, no_rope_layers=[1, 0],
              attention_bias=False, mlp_bias=False, use_sliding_window=False)),
]

for _i, _spec in enumerate(SPECS):
    _spec.first_seed = 100 * _i  # each checkpoint its own seeds, so none repeats another's weights


def build_config(spec: Spec, tok):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, SmolLM3Config

    cls = {"LlamaForCausalLM": LlamaConfig, "Qwen2ForCausalLM": Qwen2Config, "MistralForCausalLM": MistralConfig,
           "Qwen3ForCausalLM": Qwen3Config, "SmolLM3ForCausalLM": SmolLM3Config}[spec.architecture]
    kwargs = dict(spec.config)
    rope = {"rope_type": "default", "rope_theta": kwargs.pop("rope_theta")}
    if "rope_scaling" in kwargs:
        rope.update(kwargs.pop("rope_scaling"))
    base = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=64, hidden_act="silu",
                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                rope_parameters=rope, architectures=[spec.architecture])
    return cls(**{**base, **kwargs})


def randomize(model, seed: int) -> None:
    """Weights at std WEIGHT_STD, biases at 0.1, RMSNorm gains around 1: logits spread over several
    units, so that greedy choices are clear and a wrong rotary angle or missing bias shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def to_legacy(directory: Path) -> None:
    """Rewrite config.json with the keys hub checkpoints use (transformers 4 wrote them):
    rope_theta and rope_scaling at top level instead of rope_parameters, torch_dtype for dtype."""
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    theta = rope.pop("rope_theta")
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    if set(cfg.get("layer_types") or []) == {"full_attention"}:
        del cfg["layer_types"]  # Qwen2 checkpoints older than transformers 4.53 have none
    cfg["rope_theta"] = theta
    cfg["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
    path.write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


def dumps(obj, indent: str = "") -> str:
    """JSON with one entry a line, except that a list of plain values stays on one line."""
    inner = indent + "  "
    if isinstance(obj, dict) and obj:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in obj) + "\n" + indent + "]"
    return json.dumps(obj, ensure_ascii=False)


def margins(logits: np.ndarray) -> np.ndarray:
    top2 = np.sort(logits, axis=-1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def references(directory: Path, spec: Spec, prompt_ids: list[int], eos_id: int) -> dict | None:
    """The reference arrays, from the checkpoint as saved, loaded in float32 with eager attention;
    None if generation stopped at an end-of-sequence token before NEW_TOKENS tokens."""
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    assert type(model).__name__ == spec.architecture
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        prefill = model(input_ids=ids).logits[0].float().numpy()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=NEW_TOKENS, min_new_tokens=0, eos_token_id=None,
                             pad_token_id=eos_id, output_logits=True, return_dict_in_generate=True,
                             use_cache=True)
        greedy = out.sequences[0, len(prompt_ids):].numpy()
        if len(greedy) < NEW_TOKENS:
            return None
        decode = torch.stack([step[0] for step in out.logits]).float().numpy()

        # The same decode by hand against the cache, and without any cache, as checks.
        cache = DynamicCache(config=model.config)
        step_logits = model(input_ids=ids, cache=cache, use_cache=True).logits[0, -1]
        manual = [step_logits]
        for i, tok in enumerate(greedy[:-1]):
            pos = torch.tensor([[len(prompt_ids) + i]])
            step_logits = model(input_ids=torch.tensor([[int(tok)]]), cache=cache,
                                position_ids=pos, use_cache=True).logits[0, -1]
            manual.append(step_logits)
        manual = torch.stack(manual).numpy()
        full = model(input_ids=torch.tensor([prompt_ids + greedy.tolist()])).logits[0].numpy()
        nocache = full[len(prompt_ids) - 1:-1]

    assert np.array_equal(decode.argmax(-1), greedy), "greedy tokens are not the argmax of the logits"
    scale = float(np.abs(decode).max())
    assert np.abs(manual - decode).max() <= 1e-5 * scale, "manual cached decode differs from generate"
    assert np.abs(nocache - decode).max() <= 1e-4 * scale, "uncached forward differs from cached decode"
    assert np.abs(prefill[-1] - decode[0]).max() <= 1e-5 * scale
    return {
        "prompt_ids": np.asarray(prompt_ids, dtype=np.int64),
        "prefill_logits": prefill.astype(np.float32),
        "greedy_ids": greedy.astype(np.int64),
        "decode_logits": decode.astype(np.float32),
    }


def make_checkpoint(spec: Spec, tok, out: Path) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM

    prompt_ids = tok.encode(PROMPT, add_special_tokens=True)
    directory = out / spec.name
    for seed in range(spec.first_seed, spec.first_seed + 100):
        if directory.exists():
            shutil.rmtree(directory)
        config = build_config(spec, tok)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        assert type(model).__name__ == spec.architecture
        randomize(model, seed)
        model = model.to(spec.dtype)
        kwargs = {"max_shard_size": spec.max_shard_size} if spec.max_shard_size else {}
        model.save_pretrained(str(directory), safe_serialization=True, **kwargs)
        if spec.legacy_config:
            to_legacy(directory)
        llm_tokenizer.save(tok, directory, jinja_file=spec.jinja_file)
        set_tokenizer_class(directory)
        reloaded = AutoConfig.from_pretrained(str(directory))
        assert reloaded.rope_parameters == config.rope_parameters, (reloaded.rope_parameters, config.rope_parameters)
        ref = references(directory, spec, prompt_ids, tok.eos_token_id)
        if ref is None:
            print(f"  {spec.name}: seed {seed} rejected (generation stopped early)")
            continue
        margin = float(margins(ref["decode_logits"]).min())
        special = sorted(set(ref["greedy_ids"].tolist()) & set(tok.all_special_ids))
        if margin >= MIN_MARGIN and not special:
            break
        print(f"  {spec.name}: seed {seed} rejected (margin {margin:.4f}, special tokens {special})")
    else:
        raise SystemExit(f"{spec.name}: no seed gives clear greedy choices")
    np.savez(directory / "reference.npz", **ref)
    files = sorted(p.name for p in directory.iterdir())
    size = sum(p.stat().st_size for p in directory.iterdir())
    if size > SIZE_LIMIT:
        raise SystemExit(f"{spec.name}: {size} bytes, over {SIZE_LIMIT}")
    params = sum(p.numel() for p in model.parameters())
    logits = ref["decode_logits"]
    print(f"{spec.name}: seed {seed}, {params} parameters, {size} bytes, greedy {ref['greedy_ids'].tolist()}, "
          f"smallest margin {margin:.3f}, largest |logit| {np.abs(logits).max():.2f}")
    return {
        "architecture": spec.architecture,
        "covers": spec.covers,
        "seed": seed,
        "parameters": params,
        "weights_dtype": str(spec.dtype).removeprefix("torch."),
        "config_keys": "legacy (rope_theta, rope_scaling, torch_dtype)" if spec.legacy_config
        else "transformers 5 (rope_parameters, dtype)",
        "files": files,
        "bytes": size,
        "smallest_greedy_margin": round(margin, 4),
        "largest_abs_prefill_logit": round(float(np.abs(ref["prefill_logits"]).max()), 4),
        "made_with": made_with(),
    }


def made_with() -> dict:
    import safetensors
    import tokenizers
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__}


def set_tokenizer_class(directory: Path) -> None:
    """transformers 5 writes its own class name, TokenizersBackend; PreTrainedTokenizerFast is the name
    both transformers 4 and 5 load."""
    path = directory / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def tokenizer_reference(directory: Path) -> dict:
    """Encodings and decodings of TEST_STRINGS by the tokenizer as saved in `directory`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory))
    cases = []
    for s in TEST_STRINGS:
        ids = tok.encode(s, add_special_tokens=False)
        with_special = tok.encode(s, add_special_tokens=True)
        cases.append({
            "text": s,
            "ids": ids,
            "tokens": tok.convert_ids_to_tokens(ids),
            "decoded": tok.decode(ids),
            "token_decodes": [tok.decode([i]) for i in ids],
            "ids_with_special": with_special,
            "decoded_with_special": tok.decode(with_special),
            "decoded_with_special_skipped": tok.decode(with_special, skip_special_tokens=True),
        })
    chat = tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    return {
        "tokenizer": "the tokenizer.json / tokenizer_config.json of every checkpoint in this folder",
        "vocab_size": len(tok),
        "special_tokens": {t: tok.convert_tokens_to_ids(t) for t in llm_tokenizer.SPECIAL_TOKENS},
        "bos_token": tok.bos_token, "eos_token": tok.eos_token, "pad_token": tok.pad_token,
        "calls": {
            "ids": "encode(text, add_special_tokens=False)",
            "decoded": "decode(ids)",
            "token_decodes": "[decode([i]) for i in ids]",
            "ids_with_special": "encode(text, add_special_tokens=True)",
            "decoded_with_special": "decode(ids_with_special)",
            "decoded_with_special_skipped": "decode(ids_with_special, skip_special_tokens=True)",
            "chat.text": "apply_chat_template(messages, tokenize=False, add_generation_prompt=True)",
            "chat.ids": "encode(chat.text, add_special_tokens=False)",
        },
        "cases": cases,
        "chat": {"messages": CONVERSATION, "add_generation_prompt": True, "text": chat,
                 "ids": tok.encode(chat, add_special_tokens=False)},
    }


README = """\
# Tiny language-model checkpoints

Made by `python tools/make_llm_checkpoints.py` with torch {torch}, transformers {transformers},
tokenizers {tokenizers} and safetensors {safetensors} (`pip install torch=={torch_pin} transformers=={transformers}
tokenizers=={tokenizers} safetensors=={safetensors}`); the test suite reads these files without any of them.
A checkpoint made on its own (`--only NAME`) names the versions that made it, `made_with` in manifest.json.

The weights are random, drawn from a fixed seed: these models produce no meaningful text. Each
directory is a Hugging Face checkpoint saved by transformers' own classes, plus `reference.npz` with
transformers' outputs for it, computed in float32 with eager attention from the files as saved:

| key | dtype, shape | what |
| --- | --- | --- |
| `prompt_ids` | int64 (P,) | the prompt `{prompt}` encoded with BOS |
| `prefill_logits` | float32 (P, vocab) | one forward over the prompt |
| `greedy_ids` | int64 ({n},) | the new tokens of greedy generation (no EOS stop) |
| `decode_logits` | float32 ({n}, vocab) | row i: the logits that chose `greedy_ids[i]` (row 0 from the prefill, the rest from decode steps against the KV cache) |

`tokenizer_reference.json` holds the shared tokenizer's encodings and decodings of test strings and
its chat template's output; `manifest.json` lists each checkpoint and what it covers.
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "llm")
    ap.add_argument("--only", nargs="*", help="checkpoint names (default: all)")
    args = ap.parse_args(argv)

    torch.set_num_threads(2)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    raw = llm_tokenizer.train_bpe([TOKENIZER_TEXT] * 3, VOCAB, min_frequency=2)
    tok = llm_tokenizer.wrap(raw, model_max_length=64)
    assert len(tok) == VOCAB, len(tok)

    manifest_path = out / "manifest.json"
    before = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    old = before.get("checkpoints", {})
    checkpoints = {}
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            if spec.name in old:
                checkpoints[spec.name] = old[spec.name]
            continue
        checkpoints[spec.name] = make_checkpoint(spec, tok, out)

    (out / "tokenizer_reference.json").write_text(
        dumps(tokenizer_reference(out / SPECS[0].name)) + "\n")
    manifest = {
        "generator": "tools/make_llm_checkpoints.py",
        "random_weights": True,
        # the versions that made the checkpoints kept from before, where only some are made again (each
        # checkpoint's own are its made_with)
        "versions": before["versions"] if args.only and "versions" in before else made_with(),
        "prompt": PROMPT,
        "prompt_ids": tok.encode(PROMPT, add_special_tokens=True),
        "new_tokens": NEW_TOKENS,
        "generation": "greedy (do_sample=False), no EOS stop, KV cache; references from the saved "
                      "files loaded in float32, eager attention",
        "tolerance": "logits within 1e-4 of the largest |logit|; greedy tokens exact",
        "vocab_size": VOCAB,
        "num_hidden_layers": 2,
        "reference_keys": {
            "prompt_ids": "int64 (P,)",
            "prefill_logits": "float32 (P, vocab)",
            "greedy_ids": f"int64 ({NEW_TOKENS},)",
            "decode_logits": f"float32 ({NEW_TOKENS}, vocab): row i chose greedy_ids[i]",
        },
        "checkpoints": checkpoints,
    }
    manifest_path.write_text(dumps(manifest) + "\n")
    versions = dict(manifest["versions"], torch_pin=manifest["versions"]["torch"].split("+")[0])
    (out / "README.md").write_text(README.format(prompt=PROMPT, n=NEW_TOKENS, **versions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
