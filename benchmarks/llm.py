"""Language-model speed: prefill and decode tokens/s of kuiper's backends beside transformers (torch eager).

    python benchmarks/llm.py [--model DIR] [--engines numpy,opencl,transformers] [--prompt-tokens 64]
                             [--new-tokens 32] [--threads 2] [--rounds 3] [--device SPEC]
                             [--transformers-python PATH] [--json FILE]

Every engine runs in a fresh process of its own, all of them in turn, --rounds times (benchmarks/processes.py).
Each process loads the checkpoint in float32, runs one untimed greedy generation, then a timed one: the prefill
of --prompt-tokens ids as one forward, then --new-tokens decode steps, one token each. The prompt is the same
seeded ids for every engine, and every engine's greedy tokens must be the first engine's (never time a wrong
decoder). transformers needs torch: --transformers-python names an interpreter that has it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from processes import machine, python, run_rounds

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "shakespeare")
    parser.add_argument("--engines", default="numpy,opencl,transformers",
                        help="comma-separated: numpy, reference, opencl, transformers")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", help="kuiper's OpenCL device (P:D or a name substring)")
    parser.add_argument("--transformers-python", default=sys.executable,
                        help="the interpreter that runs the transformers engine (it needs torch)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # inside a round: run this engine once
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.one:
        result = run_engine(args.one, args)
        args.json.write_text(json.dumps(result))
        return

    engines = args.engines.split(",")
    common = ["--model", args.model, "--prompt-tokens", args.prompt_tokens, "--new-tokens", args.new_tokens,
              "--threads", args.threads] + (["--device", args.device] if args.device else [])
    jobs = {}
    for engine in engines:
        command = python(Path(__file__), "--one", engine, *common)
        if engine == "transformers":
            command[0] = args.transformers_python
        jobs[engine] = command
    results = run_rounds(jobs, args.rounds, progress=lambda r, key: print(f"round {r + 1}: {key}", file=sys.stderr))
    print(f"{args.model.name}: prompt {args.prompt_tokens} tokens, {args.new_tokens} new, {args.threads} threads, "
          f"{args.rounds} rounds; {machine()}")
    first = None
    summary = {}
    for engine in engines:
        rounds = results[engine]
        failed = [r["error"] for r in rounds if "error" in r]
        if failed:
            print(f"{engine:14s} failed: {failed[0]}")
            continue
        tokens = rounds[0]["tokens"]
        first = first or tokens
        agrees = "" if tokens == first else "  (greedy tokens DIFFER from the first engine's)"
        prefill = statistics.median(r["prefill_tokens_per_second"] for r in rounds)
        decode = statistics.median(r["decode_tokens_per_second"] for r in rounds)
        summary[engine] = {"prefill_tokens_per_second": prefill, "decode_tokens_per_second": decode,
                           "rounds": rounds, "agrees": not agrees}
        print(f"{engine:14s} prefill {prefill:9.1f} tokens/s   decode {decode:8.1f} tokens/s   "
              f"({rounds[0].get('device', '')}){agrees}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "model": str(args.model), "engines": summary}))


def prompt_ids(vocab: int, count: int) -> list:
    """The same seeded ids for every engine (no tokenizer involved, so that engines are compared on the model)."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(0).integers(5, vocab, count)]


def run_engine(engine: str, args) -> dict:
    if engine == "transformers":
        return run_transformers(args)
    import kuiper

    kuiper.set_num_threads(args.threads)
    backend = engine
    lm = kuiper.llm.load(args.model, backend=backend, device=args.device)
    lm.eos_token_ids = frozenset()  # always the full count of new tokens
    ids = prompt_ids(lm.config.vocab_size, args.prompt_tokens)
    lm.generate(ids, max_new_tokens=args.new_tokens)  # warm-up: plans, kernels, caches
    tokens = lm.generate(ids, max_new_tokens=args.new_tokens)
    t = lm.last_timings
    device = lm.graph.runtime.device.name.strip() if lm.graph.runtime is not None else f"{args.threads} threads"
    return {"tokens": tokens, "prefill_tokens_per_second": t.prefill_rate, "decode_tokens_per_second": t.decode_rate,
            "device": device}


def run_transformers(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids = torch.tensor([prompt_ids(model.config.vocab_size, args.prompt_tokens)])

    def greedy():
        with torch.inference_mode():
            started = time.perf_counter()
            out = model(ids, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            prefilled = time.perf_counter()
            past, tokens = out.past_key_values, [int(token)]
            for _ in range(args.new_tokens - 1):
                out = model(token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(int(token))
            done = time.perf_counter()
        return tokens, prefilled - started, done - prefilled

    greedy()  # warm-up
    tokens, prefill, decode = greedy()
    # as kuiper counts them: the prefill yields the first new token, each decode step one more
    return {"tokens": tokens, "prefill_tokens_per_second": args.prompt_tokens / prefill,
            "decode_tokens_per_second": (args.new_tokens - 1) / decode, "device": f"{args.threads} threads"}


if __name__ == "__main__":
    main()
