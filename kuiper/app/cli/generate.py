"""The language-model commands: `kuiper generate`, `kuiper chat`, and `kuiper inspect MODEL_DIR` (inspect.py
hands a model directory over to `inspect_model`).

    kuiper generate [MODEL_DIR] --prompt TEXT     the text as it decodes, then prefill and decode tokens/s
    kuiper chat MODEL_DIR                         the chat template, one turn per line of stdin, until EOF
    kuiper inspect MODEL_DIR                      the model, its KV cache and its graph, operator by operator

Without MODEL_DIR, `kuiper generate` runs the model shipped in models/shakespeare/. The timings go to stderr, so
that stdout holds the text alone (`--json` puts the tokens, text and timings in one object on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kuiper.app.cli.common import BACKEND_HELP, TEMPLATE_KWARGS_HELP, json_object, say_backend
from kuiper.core.errors import CheckpointError, InputError
from kuiper.core.shipped import shipped
from kuiper.runtime.auto import AUTO, CHOICES

SHIPPED = "shakespeare"  # within models/


def add_parser(sub, common, custom) -> None:
    """`generate` and `chat` on the CLI's subcommand parser (`common`: the options every command takes)."""
    sampling = argparse.ArgumentParser(add_help=False)
    sampling.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="at most N new tokens "
                          "(default 128; generation also stops at the end-of-sequence token)")
    sampling.add_argument("--temperature", type=float, default=0.8, metavar="T",
                          help="0 for greedy, the likeliest token each time (default 0.8)")
    sampling.add_argument("--top-k", type=int, default=0, metavar="K", help="draw from the K likeliest tokens "
                          "only (default 0: all)")
    sampling.add_argument("--top-p", type=float, default=0.95, metavar="P",
                          help="draw from the fewest likeliest tokens whose probabilities reach P (default 0.95)")
    sampling.add_argument("--seed", type=int, help="seed the draws, for the same text each run")
    sampling.add_argument("--backend", default=AUTO, choices=CHOICES, help=BACKEND_HELP)
    sampling.add_argument("--device", help="the OpenCL device (P:D or a name), with --backend opencl")
    sampling.add_argument("--context", type=int, metavar="N", help="positions the KV cache holds (default: the "
                          "model's, at most 4096)")
    sampling.add_argument("--quantize", choices=["int8"], help="int8: every Linear's weights as int8 with a scale "
                          "per 32 inputs, quantized as the model loads (a quarter of float32's memory)")

    generate = sub.add_parser("generate", parents=[common, sampling],
                              help=f"generate text with a language model (default: the shipped {SHIPPED} model)")
    generate.add_argument("model", nargs="?", metavar="MODEL_DIR",
                          help=f"a Hugging Face model directory (default: models/{SHIPPED}/)")
    generate.add_argument("--prompt", required=True, help="the text to continue")
    generate.add_argument("--json", action="store_true", help="print one JSON object: tokens, text, timings")
    generate.set_defaults(func=cmd_generate)

    chat = sub.add_parser("chat", parents=[common, sampling],
                          help="chat with a language model: one turn per line of stdin, until end of input")
    chat.add_argument("model", metavar="MODEL_DIR", help="a Hugging Face model directory with a chat template")
    chat.add_argument("--system", help="a system message to begin the conversation")
    chat.add_argument("--template-kwargs", metavar="JSON", type=json_object, default={}, help=TEMPLATE_KWARGS_HELP)
    chat.set_defaults(func=cmd_chat)


def is_model_dir(path) -> bool:
    """Whether `kuiper inspect PATH` means a language model: a directory holding config.json."""
    return path is not None and (Path(path) / "config.json").is_file()


def default_model() -> Path:
    path = shipped("models") / SHIPPED
    if not (path / "config.json").is_file():
        raise CheckpointError(f"no MODEL_DIR given, and the shipped model {path} is not there (tools/train_llm.py "
                          f"trains it): give a Hugging Face model directory")
    return path


def _load(args, model):
    from kuiper.llm import load

    lm = load(model, backend=args.backend, device=args.device, context=args.context, quantize=args.quantize)
    say_backend(lm.graph)
    return lm


def _sampling(args) -> dict:
    return dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, seed=args.seed)


def _rates(timings) -> str:
    return (f"prefill: {timings.prefill_tokens} tokens, {timings.prefill_rate:.1f} tokens/s; "
            f"decode: {timings.decode_tokens} tokens, {timings.decode_rate:.1f} tokens/s")


def cmd_generate(args) -> None:
    model = Path(args.model) if args.model else default_model()
    lm = _load(args, model)
    if args.json:
        ids = lm.tokenizer.encode(args.prompt)
        tokens = lm.generate(ids, **_sampling(args))
        t = lm.last_timings
        print(json.dumps({
            "model": str(model), "backend": lm.graph.backend, "prompt": args.prompt, "prompt_tokens": ids,
            "tokens": tokens, "text": lm.tokenizer.decode(tokens, skip_special_tokens=True),
            "timings": {"prefill_tokens": t.prefill_tokens, "prefill_seconds": t.prefill_seconds,
                        "prefill_tokens_per_second": t.prefill_rate, "decode_tokens": t.decode_tokens,
                        "decode_seconds": t.decode_seconds, "decode_tokens_per_second": t.decode_rate},
        }))
        return
    pieces = lm.stream(args.prompt, **_sampling(args))  # the options checked before anything is printed
    print(args.prompt, end="", flush=True)
    for piece in pieces:
        print(piece, end="", flush=True)
    print()
    print(_rates(lm.last_timings), file=sys.stderr)


def cmd_chat(args) -> None:
    from kuiper.llm.tokenizer import check_unicode

    lm = _load(args, Path(args.model))
    if lm.tokenizer.chat_template is None:
        raise CheckpointError(f"{lm.directory}: no chat template (tokenizer_config.json's chat_template or "
                              f"chat_template.jinja): chat needs a chat model; kuiper generate continues text")
    system = [{"role": "system", "content": args.system}] if args.system else []
    turns = []
    echo = not sys.stdin.isatty()  # piped input: show each line, so that the transcript reads as a dialogue
    print(f"chatting with {model_name(lm)}; end with Ctrl-D", file=sys.stderr)
    while True:
        print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            print()
            return
        line = line.rstrip("\n")
        try:
            check_unicode(line, "this line")
        except InputError as e:  # refused, the conversation goes on
            if echo:
                print()  # the prompt's line ends, as with a line shown
            print(f"kuiper: {e}", file=sys.stderr)
            continue
        if echo:
            print(line)
        if not line.strip():
            continue
        turns.append({"role": "user", "content": line})
        ids = _fitting(lm, system, turns, args.template_kwargs)
        if ids is None:
            turns.pop()
            print(f"kuiper: this message does not fit the context of {lm.context} tokens", file=sys.stderr)
            continue
        reply = []
        for piece in lm.stream(ids, **_sampling(args)):
            print(piece, end="", flush=True)
            reply.append(piece)
        print()
        turns.append({"role": "assistant", "content": "".join(reply)})


def _fitting(lm, system: list, turns: list, variables: dict | None = None):
    """The conversation's ids, the oldest turns left out until it leaves room for a reply; None if the last
    message alone does not fit. `variables`: more names for the chat template."""
    while turns:
        text = lm.tokenizer.apply_chat_template(system + turns, variables=variables)
        ids = lm.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) < lm.context:
            return ids
        if len(turns) == 1:
            return None
        del turns[:2]  # a user turn and the reply to it
    return None


def model_name(lm) -> str:
    return lm.directory.name or str(lm.directory)


def inspect_model(args, console) -> None:
    """`kuiper inspect MODEL_DIR`: the architecture, parameters and KV cache, then the decoder graph's operators
    with their shapes for a prompt of 8 tokens (or --input-shape 1,N)."""
    from kuiper.app import inspection
    from kuiper.llm import load
    from kuiper.runtime.memory import format_bytes

    lm = load(args.model, backend=args.backend)
    c, graph = lm.config, lm.graph
    tokens = args.input_shape[0][-1] if args.input_shape else min(8, lm.context)
    plan = graph.layout_for((1, tokens), (tokens,))
    rows = inspection.operator_rows(graph, plan)
    per_token = c.kv_cache_bytes_per_token()
    dtypes = sorted({entry.dtype for entry in lm.weights.tensors.values()})
    summary = {
        "model": str(args.model), "model_type": c.model_type, "layers": c.num_hidden_layers,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size, "heads": c.num_attention_heads,
        "kv_heads": c.num_key_value_heads, "head_dim": c.head_dim, "vocab_size": c.vocab_size,
        "parameters": lm.parameters, "weight_dtypes": dtypes, "tied_embeddings": c.tie_word_embeddings,
        "rope": {"theta": c.rope_theta, **c.rope_scaling} if c.rope_scaling else {"theta": c.rope_theta},
        "context": lm.context, "max_position_embeddings": c.max_position_embeddings,
        "kv_cache_bytes_per_token": per_token, "kv_cache_bytes": per_token * lm.context,
        "tokenizer": {"tokens": lm.tokenizer.vocab_size, "bos": lm.tokenizer.bos_token_id,
                      "eos": sorted(lm.eos_token_ids), "chat_template": lm.tokenizer.chat_template is not None},
        "backend": args.backend, "operators": len(graph.order), "prompt_tokens": tokens,
    }
    if args.json:
        summary["rows"] = [{"name": r.name, "type": r.type, "inputs": [list(s) for s in r.inputs],
                            "outputs": [list(s) for s in r.outputs], "params": int(r.params), "macs": int(r.macs)}
                           for r in rows]
        print(json.dumps(summary))
        return
    from rich.table import Table

    say = lambda text: console.print(text, highlight=False)  # noqa: E731
    say(f"[bold]{args.model}[/]: {c.model_type}, {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"{c.num_attention_heads} heads ({c.num_key_value_heads} KV heads, head_dim {c.head_dim}), "
        f"MLP {c.intermediate_size}, vocabulary {c.vocab_size}")
    say(f"parameters: {lm.parameters:,} ({', '.join(dtypes)} in the checkpoint"
        f"{'; lm_head tied to the embedding' if c.tie_word_embeddings else ''})")
    rope = ", ".join(f"{k} {v}" for k, v in summary["rope"].items())
    say(f"rotary embedding: {rope}")
    say(f"KV cache: {format_bytes(per_token)} per token (float32), {format_bytes(per_token * lm.context)} for the "
        f"context of {lm.context} positions (the model's max_position_embeddings: {c.max_position_embeddings})")
    t = lm.tokenizer
    say(f"tokenizer: {t.vocab_size} tokens, BOS {t.bos_token} ({t.bos_token_id}), end of sequence "
        f"{sorted(lm.eos_token_ids)}, {'a' if t.chat_template else 'no'} chat template")
    say(f"graph: {len(graph.order)} operators as the {args.backend} backend runs them (the .pnnx.param kuiper writes "
        f"from config.json), at a prompt of {tokens} tokens:")
    table = Table()
    for col in ("operator", "type", "inputs", "outputs", "params", "MMACs"):
        table.add_column(col, justify="right" if col in ("params", "MMACs") else "left")
    for row in rows:
        table.add_row(row.name, row.type, " ".join("x".join(map(str, s)) for s in row.inputs),
                      " ".join("x".join(map(str, s)) for s in row.outputs), f"{row.params:,}" if row.params else "",
                      f"{row.macs / 1e6:.2f}" if row.macs else "")
    console.print(table)
