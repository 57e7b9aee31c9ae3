"""`kuiper serve [MODEL_DIR]`: the model behind an OpenAI-compatible API (kuiper/app/serve/), until Ctrl-C.

Without MODEL_DIR it serves the shipped models/shakespeare/. It binds 127.0.0.1 unless --host says otherwise:
with --host 0.0.0.0 anyone who can reach the machine can use it, so give --api-key too.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from kuiper.app.cli.common import BACKEND_HELP, TEMPLATE_KWARGS_HELP, CliError, json_object, say_backend
from kuiper.runtime.auto import AUTO, CHOICES

#: the positions the KV cache's pool holds for all the sequences in flight, unless --max-tokens-in-flight says
DEFAULT_TOKENS_IN_FLIGHT = 4096


def add_parser(sub, common, custom) -> None:
    serve = sub.add_parser("serve", parents=[common], help="serve a language model over an OpenAI-compatible API "
                           "(needs the serve extra: pip install \"kuiper[serve]\")")
    serve.add_argument("model", nargs="?", metavar="MODEL_DIR",
                       help="a Hugging Face model directory (default: models/shakespeare/)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port (default 8000)")
    serve.add_argument("--backend", default=AUTO, choices=CHOICES, help=BACKEND_HELP)
    serve.add_argument("--device", help="the OpenCL device (P:D or a name), with --backend opencl")
    serve.add_argument("--context", type=int, metavar="N", help="positions one sequence may reach (default: the "
                       "model's, at most 4096)")
    serve.add_argument("--max-batch", type=int, default=16, metavar="N",
                       help="sequences generated together, one forward a step (default 16)")
    serve.add_argument("--max-tokens-in-flight", type=int, default=DEFAULT_TOKENS_IN_FLIGHT, metavar="T",
                       help=f"positions the paged KV cache holds for all sequences together (default "
                            f"{DEFAULT_TOKENS_IN_FLIGHT}, at least the context)")
    serve.add_argument("--max-queue", type=int, default=64, metavar="Q",
                       help="requests waiting to start before more get 429 (default 64)")
    serve.add_argument("--api-key", metavar="KEY", help="require 'Authorization: Bearer KEY'")
    serve.add_argument("--template-kwargs", metavar="JSON", type=json_object, default={},
                       help=TEMPLATE_KWARGS_HELP + ", for every chat request (a request's chat_template_kwargs go over "
                            "them)")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args) -> None:
    for option, value in (("--port", args.port), ("--max-batch", args.max_batch),
                          ("--max-tokens-in-flight", args.max_tokens_in_flight), ("--max-queue", args.max_queue)):
        if value < (0 if option == "--port" else 1) or (option == "--port" and value > 65535):
            raise CliError(f"{option} {value}: out of range")
    if args.api_key is not None and not args.api_key.strip():
        raise CliError("--api-key: give a key that is not empty")
    try:
        from kuiper.app.serve import Server
        from kuiper.app.serve.server import listening_socket

        import starlette  # noqa: F401  (only to say what is missing before loading the model)
    except ImportError as e:
        raise CliError(f"kuiper serve needs {e.name}: pip install \"kuiper[serve]\"") from None
    from kuiper.app.cli.generate import default_model
    from kuiper.llm import load
    from kuiper.llm.paged import BLOCK_SIZE
    from kuiper.runtime.memory import format_bytes

    if args.host not in ("127.0.0.1", "localhost", "::1") and args.api_key is None:
        warnings.warn(f"--host {args.host} without --api-key: anyone who can reach this machine can use the model")
    sock = listening_socket(args.host, args.port)  # a busy port is said now, not after the model loads
    model = Path(args.model) if args.model else default_model()
    lm = load(model, backend=args.backend, device=args.device, context=args.context,
              cache_tokens=args.max_tokens_in_flight)
    say_backend(lm.graph)
    server = Server(lm, args.host, args.port, args.api_key, args.max_batch, args.max_queue, sock, args.template_kwargs)
    positions = lm.cache_blocks * BLOCK_SIZE
    host = f"[{args.host}]" if ":" in args.host else args.host  # an IPv6 address, as a URL writes it
    print(f"kuiper serve: {lm.directory.name} on http://{host}:{server.port}/v1 ({lm.graph.backend}; up to "
          f"{args.max_batch} sequences a step; KV cache of {positions} positions, "
          f"{format_bytes(lm.config.kv_cache_bytes_per_token() * positions)}); Ctrl-C stops", file=sys.stderr)
    server.run()
