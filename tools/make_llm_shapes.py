"""Make random-weight checkpoints at the shapes of real small language models, for benchmarks/llm.py's speed runs.

    python tools/make_llm_shapes.py [--out ~/.cache/kuiper/llm-shapes] [--only smollm-135m qwen2.5-0.5b]
                                    [--dtype bfloat16]

Needs torch and transformers (as tools/make_llm_checkpoints.py). Each checkpoint is transformers' own model
class built from the published model's config.json values (below) with transformers' random initialisation
from a fixed seed, saved with `save_pretrained` in --dtype (bfloat16, as the published weights are), with the
tiny byte-level tokenizer of models/llm/ (ids below 384: enough for a benchmark's seeded prompt ids). The text
such a model writes means nothing; its speed is that of the real model: the same matrices, the same cache.
Out of the repository (over a gigabyte for Qwen2.5-0.5B's shape).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "models" / "llm" / "llama_gqa"

#: the config.json values of HuggingFaceTB/SmolLM-135M, Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B and
#: meta-llama/Llama-3.2-1B (its rope scaling left out: it changes no cost) that fix their computation
SHAPES = {
    "smollm-135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                  num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                  max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
                                  tie_word_embeddings=True)),
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                   max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                   tie_word_embeddings=True)),
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                 max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                 attention_bias=False, tie_word_embeddings=True)),
    "llama3.2-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                  max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                                  tie_word_embeddings=True)),
}


def make(name: str, out: Path, dtype: str) -> Path:
    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)

    model_type, values = SHAPES[name]
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
                                 "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[model_type]
    torch.manual_seed(0)
    config = config_class(**values, bos_token_id=0, eos_token_id=1)
    model = model_class(config).to(getattr(torch, dtype))
    directory = out / name
    model.save_pretrained(directory)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / file, directory / file)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{directory}: {model_type}, {parameters / 1e6:.1f}M parameters, {dtype}", flush=True)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path.home() / ".cache" / "kuiper" / "llm-shapes")
    parser.add_argument("--only", nargs="*", choices=sorted(SHAPES), default=sorted(SHAPES))
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = parser.parse_args()
    for name in args.only:
        make(name, args.out, args.dtype)


if __name__ == "__main__":
    main()
