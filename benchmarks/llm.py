"""Language-model speed: prefill and decode tokens/s of kuiper's backends beside transformers and llama.cpp.

    python benchmarks/llm.py [--model DIR] [--engines numpy,opencl,numpy-int8,opencl-int8,opencl-fp16,transformers,
                             transformers-cuda,transformers-cuda-fp16,llama.cpp-f32,llama.cpp-q8_0] [--prompt-tokens 64] [--new-tokens 32] [--threads 2]
                             [--rounds 3] [--device SPEC] [--baseline transformers]
                             [--transformers-python PATH] [--llama-python PATH] [--gguf-dir DIR] [--json FILE]

Engines: kuiper's backends (numpy, reference, opencl; `-int8` loads with quantize="int8", `opencl-fp16` with
precision="fp16"), transformers (torch eager, float32; `-cuda` on the GPU, `-cuda-fp16` there in half) and llama.cpp through llama-cpp-python (`-f32` and `-q8_0`: the GGUF files
tools/make_gguf.py writes into --gguf-dir, named <model dir name>-f32.gguf and -q8_0.gguf).

Every engine runs in a fresh process of its own, all of them in turn, --rounds times (benchmarks/processes.py),
on --threads threads (kuiper's and BLAS's, torch's, llama.cpp's; an OpenCL device runs on every core it has). Each
process loads the checkpoint, runs two untimed greedy generations (kuiper on OpenCL records a plan at its second
forward and replays it from the third: the prefill's plan is met once a generation), then a timed one: the
prefill of --prompt-tokens ids as one forward, then --new-tokens - 1 decode steps, one token each. The prompt is
the same seeded ids for every engine. Per engine: the medians over rounds, and the median over rounds of its
ratio to --baseline's figure of the same round (rounds interleave engines, so that a slower spell of a shared
machine touches all of them alike). Engines of one precision (float, int8) should pick the same greedy tokens;
where they do not, the table says so (random weights give near ties that rounding decides).
transformers and llama.cpp need torch and llama_cpp: --transformers-python and --llama-python name
interpreters that have them.
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
DEFAULT_GGUF = Path.home() / ".cache" / "kuiper" / "gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "shakespeare")
    parser.add_argument("--engines", default="numpy,opencl,transformers",
                        help="comma-separated: numpy, reference, opencl (each also -int8), transformers, "
                             "llama.cpp-f32, llama.cpp-q8_0")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", help="kuiper's OpenCL device (P:D or a name substring)")
    parser.add_argument("--baseline", help="the engine the ratios divide by (default: the first)")
    parser.add_argument("--transformers-python", default=sys.executable,
                        help="the interpreter that runs the transformers engine (it needs torch)")
    parser.add_argument("--llama-python", default=sys.executable,
                        help="the interpreter that runs the llama.cpp engines (it needs llama_cpp)")
    parser.add_argument("--gguf-dir", type=Path, default=DEFAULT_GGUF, help="where tools/make_gguf.py wrote them")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # inside a round: run this engine once
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.one:
        result = run_engine(args.one, args)
        args.json.write_text(json.dumps(result))
        return

    engines = args.engines.split(",")
    baseline = args.baseline or engines[0]
    common = ["--model", args.model, "--prompt-tokens", args.prompt_tokens, "--new-tokens", args.new_tokens,
              "--threads", args.threads, "--gguf-dir", args.gguf_dir] + (["--device", args.device] if args.device
                                                                         else [])
    jobs = {}
    for engine in engines:
        command = python(Path(__file__), "--one", engine, *common)
        if engine.startswith("transformers"):
            command[0] = args.transformers_python
        elif engine.startswith("llama.cpp"):
            command[0] = args.llama_python
        jobs[engine] = command
    results = run_rounds(jobs, args.rounds, progress=lambda r, key: print(f"round {r + 1}: {key}", file=sys.stderr))
    print(f"{args.model.name}: prompt {args.prompt_tokens} tokens, {args.new_tokens} new, {args.threads} threads, "
          f"{args.rounds} rounds; {machine()}")
    print(f"{'engine':16s} {'prefill tok/s':>13s} {'decode tok/s':>12s} {'ms/token':>9s}   ratios to {baseline} "
          f"(prefill, decode; median of rounds)")
    summary, first_tokens = {}, {}
    for engine in engines:
        rounds = results[engine]
        failed = [r["error"] for r in rounds if "error" in r]
        if failed:
            print(f"{engine:16s} failed: {failed[0]}")
            continue
        kind = "int8" if engine.endswith(("-int8", "-q8_0")) else "float"
        tokens = rounds[0]["tokens"]
        agrees = first_tokens.setdefault(kind, tokens) == tokens
        prefill = statistics.median(r["prefill_tokens_per_second"] for r in rounds)
        decode = statistics.median(r["decode_tokens_per_second"] for r in rounds)
        ratios = {}
        base = results.get(baseline)
        if base and not any("error" in r for r in base):
            for key in ("prefill_tokens_per_second", "decode_tokens_per_second"):
                ratios[key] = statistics.median(r[key] / b[key] for r, b in zip(rounds, base))
        summary[engine] = {"prefill_tokens_per_second": prefill, "decode_tokens_per_second": decode,
                           "ratios_to_baseline": ratios, "rounds": rounds, "agrees": agrees}
        ratio_text = (f"{ratios['prefill_tokens_per_second']:5.2f}x {ratios['decode_tokens_per_second']:5.2f}x"
                      if ratios else "")
        print(f"{engine:16s} {prefill:13.1f} {decode:12.1f} {1e3 / decode:9.1f}   {ratio_text}  "
              f"({rounds[0].get('device', '')}){'' if agrees else f'  (greedy tokens differ from the first {kind} engine)'}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "model": str(args.model), "baseline": baseline,
                                         "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                                         "threads": args.threads, "engines": summary}))


def prompt_ids(vocab: int, count: int) -> list:
    """The same seeded ids for every engine (no tokenizer involved, so that engines are compared on the model)."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(0).integers(5, vocab, count)]


def run_engine(engine: str, args) -> dict:
    if engine.startswith("transformers"):
        return run_transformers(args, cuda="-cuda" in engine, half=engine.endswith("-fp16"))
    if engine.startswith("llama.cpp-"):
        return run_llama_cpp(args, engine.split("-", 1)[1])
    from kuiper.cpu.blas import restart_if_misread

    restart_if_misread()  # AVX-512 kernels where numpy's OpenBLAS does not know the CPU (kuiper/cpu/blas.py)
    from threadpoolctl import threadpool_limits

    import kuiper

    kuiper.set_num_threads(args.threads)
    threadpool_limits(args.threads, user_api="blas")  # with one thread kuiper leaves BLAS as it is configured
    backend, _, option = engine.partition("-")
    lm = kuiper.llm.load(args.model, backend=backend, device=args.device, quantize=option if option == "int8" else None,
                         precision="fp16" if option == "fp16" else "fp32", context=args.prompt_tokens + args.new_tokens)
    lm.eos_token_ids = frozenset()  # always the full count of new tokens
    ids = prompt_ids(lm.config.vocab_size, args.prompt_tokens)
    for _ in range(2):  # warm-up: plans, kernels, caches, recorded forwards
        lm.generate(ids, max_new_tokens=args.new_tokens)
    tokens = lm.generate(ids, max_new_tokens=args.new_tokens)
    t = lm.last_timings
    device = lm.graph.runtime.device.name.strip() if lm.graph.runtime is not None else f"{args.threads} threads"
    return {"tokens": tokens, "prefill_tokens_per_second": t.prefill_rate, "decode_tokens_per_second": t.decode_rate,
            "device": device}


def timed_greedy(prefill, step, prompt: list, new_tokens: int) -> tuple:
    """(tokens, prefill seconds, decode seconds) of a greedy generation: `prefill(ids)` and `step(token)` return
    the next token's logits, as kuiper counts them: the prefill yields the first new token, each step one more."""
    started = time.perf_counter()
    tokens = [int(prefill(prompt).argmax())]
    prefilled = time.perf_counter()
    for _ in range(new_tokens - 1):
        tokens.append(int(step(tokens[-1]).argmax()))
    return tokens, prefilled - started, time.perf_counter() - prefilled


def rates(args, tokens, prefill: float, decode: float) -> dict:
    return {"tokens": tokens, "prefill_tokens_per_second": args.prompt_tokens / prefill,
            "decode_tokens_per_second": (args.new_tokens - 1) / decode, "device": f"{args.threads} threads"}


def run_transformers(args, cuda: bool = False, half: bool = False) -> dict:
    """transformers' eager forward with its KV cache; on the GPU with cuda (each step's argmax waits for it)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if cuda else "cpu")
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float16 if half else torch.float32,
                                                 attn_implementation="eager").to(device)
    model.eval()
    state = {}

    def prefill(ids):
        out = model(torch.tensor([ids], device=device), use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[0, -1]

    def step(token):
        out = model(torch.tensor([[token]], device=device), past_key_values=state["past"], use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[0, -1]

    ids = prompt_ids(model.config.vocab_size, args.prompt_tokens)
    with torch.inference_mode():
        for _ in range(2):  # warm-up, as kuiper's
            timed_greedy(prefill, step, ids, args.new_tokens)
        result = rates(args, *timed_greedy(prefill, step, ids, args.new_tokens))
    if cuda:
        result["device"] = torch.cuda.get_device_name(device)
    return result


def run_llama_cpp(args, kind: str) -> dict:
    import numpy as np
    from llama_cpp import Llama

    path = args.gguf_dir / f"{args.model.name}-{kind}.gguf"
    if not path.is_file():
        raise SystemExit(f"{path}: no such GGUF file (tools/make_gguf.py {args.model} --outtype {kind} writes it)")
    context = args.prompt_tokens + args.new_tokens
    llm = Llama(str(path), n_ctx=context, n_batch=context, n_ubatch=context, n_threads=args.threads,
                n_threads_batch=args.threads, verbose=False)

    def last_logits():  # the batch's last token's row, the one llama-cpp-python asks logits for
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()

    def prefill(ids):
        llm.reset()
        llm.eval(ids)
        return last_logits()

    def step(token):
        llm.eval([token])
        return last_logits()

    ids = prompt_ids(llm.n_vocab(), args.prompt_tokens)
    for _ in range(2):  # warm-up, as kuiper's
        timed_greedy(prefill, step, ids, args.new_tokens)
    return rates(args, *timed_greedy(prefill, step, ids, args.new_tokens))


if __name__ == "__main__":
    main()
