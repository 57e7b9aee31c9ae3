"""`kuiper serve` under load: N concurrent clients on loopback, each sending requests back to back for a fixed
time, prompts and output lengths mixed.

    python benchmarks/serve.py [--model DIR] [--clients 1,4,16,64] [--seconds 20] [--rounds 1] [--backend auto]
                               [--max-batch 16] [--max-tokens-in-flight 4096] [--max-queue 64] [--json FILE]

The server runs as `kuiper serve` in a process of its own, so that its resident memory (VmRSS, read from /proc
every second) is the server's alone. Each client is a thread here speaking raw HTTP (http.client) on one
kept-alive connection, streaming, so that the time to the first token is seen; the output tokens are those the
server counts (stream_options include_usage). Requests are greedy, their prompts cut from a fixed text at 4 to
100 words, max_tokens drawn from 8 to 96, from one seeded generator per client: every run asks the same. Reported
per client count:
requests/s, output tokens/s, time to first token and latency (p50, p99), errors (a status other than 200, or a
broken stream), and the server's RSS at the start and end of the run and at its largest. The backend is
`kuiper serve`'s default unless --backend says otherwise, and the output names what the server ran on (its
`backend:` line for the default). With --rounds R the client counts run R times over, interleaved, and each count's
rate is compared with one client's of the same round, the median of those ratios reported: a shared machine moves
one run's rate by tens of percent.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from processes import machine

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("Now comes the evening on the walls of Verona, and the watch is set; the lamps are lit along the river, "
        "and a boy runs with a letter that no one will read before the morning. Speak, good friend, what news "
        "from the court? The duke is angry and the queen is silent, the guards are doubled at the gate, and every "
        "merchant counts his coin twice. Go tell my lord that I will come, though all the world stand in the way; "
        "and if he asks what kept me, say the moon was slow to rise and the roads were long with rain. ") * 2
WORDS = TEXT.split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def percentile(values: list, p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def one_request(connection: http.client.HTTPConnection, prompt: str, max_tokens: int) -> tuple:
    """(time to first token, latency, output tokens) of one streamed completion on a kept-alive connection, as
    the openai client keeps its connections; raises on any failure."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    started = time.perf_counter()
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    if reply.status != 200:
        raise RuntimeError(f"status {reply.status}: {reply.read()[:200]!r}")
    first, tokens, done, pending = None, None, False, b""
    # whatever has arrived, split into events: reading line by line through the chunked decoding costs the
    # clients, which share the server's cores, several times as much Python
    while not done:
        arrived = reply.read1(1 << 16)
        if not arrived:
            break
        *events, pending = (pending + arrived).split(b"\n\n")
        for event in events:
            data = event[6:] if event.startswith(b"data: ") else None
            if data == b"[DONE]":
                done = True
            elif data is not None and (first is None or b'"usage"' in data):  # the rest are only counted
                parsed = json.loads(data)
                if parsed.get("choices") and parsed["choices"][0]["text"] and first is None:
                    first = time.perf_counter() - started
                if parsed.get("usage"):
                    tokens = parsed["usage"]["completion_tokens"]
    if not done or tokens is None:
        raise RuntimeError("the stream ended early")
    reply.read()  # the chunked body's end: the connection is then free for the next request
    return first if first is not None else time.perf_counter() - started, time.perf_counter() - started, tokens


def run_clients(port: int, clients: int, seconds: float, pid: int) -> dict:
    results, errors, lock = [], [], threading.Lock()
    stop = time.perf_counter() + seconds

    def client(index: int) -> None:
        rng = random.Random(index)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while time.perf_counter() < stop:
            words = rng.randint(4, 100)
            start = rng.randrange(len(WORDS) - words)
            try:
                result = one_request(connection, " ".join(WORDS[start:start + words]), rng.randint(8, 96))
                with lock:
                    results.append(result)
            except Exception as e:  # noqa: BLE001 (counted and shown, the benchmark goes on)
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                connection.close()  # a new connection for the next request
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        connection.close()

    rss = [rss_bytes(pid)]
    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        time.sleep(1.0)
        rss.append(rss_bytes(pid))
    elapsed = time.perf_counter() - began  # the last requests run past `seconds`: counted, and so is their time
    ttft, latency = [r[0] for r in results], [r[1] for r in results]
    tokens = sum(r[2] for r in results)
    return {"clients": clients, "seconds": elapsed, "requests": len(results), "requests_per_s": len(results) / elapsed,
            "output_tokens": tokens, "output_tokens_per_s": tokens / elapsed,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "latency_p50_s": percentile(latency, 50), "latency_p99_s": percentile(latency, 99),
            "errors": len(errors), "error_examples": errors[:3],
            "rss_start": rss[0], "rss_end": rss[-1], "rss_max": max(rss), "rss_samples": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "shakespeare")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--backend", default="auto", help="as kuiper serve's (default: auto, as it)")
    parser.add_argument("--device")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--max-tokens-in-flight", type=int, default=4096)
    parser.add_argument("--max-queue", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the client counts this many times, interleaved; ratios are medians over rounds")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    port = free_port()
    command = [sys.executable, "-m", "kuiper", "serve", str(args.model), "--port", str(port), "--backend",
               args.backend, "--max-batch", str(args.max_batch), "--max-tokens-in-flight",
               str(args.max_tokens_in_flight), "--max-queue", str(args.max_queue)]
    if args.device:
        command += ["--device", args.device]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    said = []  # the server's stderr, read as it comes so that a full pipe never blocks it
    reader = threading.Thread(target=lambda: said.extend(line for line in server.stderr), daemon=True)
    reader.start()
    try:
        waited = time.monotonic() + 120
        while True:
            try:
                with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=300)) as connection:
                    one_request(connection, "Good morrow", 4)  # ready, and warm
                break
            except (OSError, RuntimeError, http.client.HTTPException):
                if server.poll() is not None or time.monotonic() > waited:
                    reader.join(5)
                    raise SystemExit(f"the server did not start: {''.join(said)}")
                time.sleep(0.2)
        rows = []
        for index in range(1, args.rounds + 1):
            for clients in (int(c) for c in args.clients.split(",")):
                print(f"round {index}: {clients} clients for {args.seconds:.0f} s ...", file=sys.stderr)
                rows.append({"round": index, **run_clients(port, clients, args.seconds, server.pid)})
    finally:
        server.terminate()
        server.wait(timeout=30)

    mib = 1 << 20
    backend = next((line[len("backend: "):].strip() for line in said if line.startswith("backend: ")), args.backend)
    print(f"{args.model.name} on {backend}, max batch {args.max_batch}, {args.seconds:.0f} s per row; {machine()}")
    print("| round | clients | requests/s | output tokens/s | TTFT p50 / p99 (s) | latency p50 / p99 (s) | errors | "
          "server RSS start / end / max (MiB) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['round']} | {r['clients']} | {r['requests_per_s']:.2f} | {r['output_tokens_per_s']:.1f} | "
              f"{r['ttft_p50_s']:.3f} / {r['ttft_p99_s']:.3f} | {r['latency_p50_s']:.2f} / {r['latency_p99_s']:.2f} | "
              f"{r['errors']} | {r['rss_start'] / mib:.0f} / {r['rss_end'] / mib:.0f} / {r['rss_max'] / mib:.0f} |")
    # each round's rate against one client's in the same round: the machine's drift between rounds cancels
    single = {r["round"]: r["output_tokens_per_s"] for r in rows if r["clients"] == 1}
    for clients in sorted({r["clients"] for r in rows} - {1}) if single else []:
        ratios = [r["output_tokens_per_s"] / single[r["round"]] for r in rows
                  if r["clients"] == clients and single.get(r["round"])]
        each = f" (rounds: {', '.join(f'{x:.2f}' for x in ratios)})" if len(ratios) > 1 else ""
        print(f"{clients} clients: {statistics.median(ratios):.2f}x the output tokens/s of one{each}")
    for r in rows:
        for example in r["error_examples"]:
            print(f"{r['clients']} clients, error: {example}")
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.model), "backend": backend, "machine": machine(),
                                         "max_batch": args.max_batch, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
