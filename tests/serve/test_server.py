"""`kuiper serve` over HTTP on a free loopback port: the official `openai` client for completions, chat and
streaming, many overlapping requests each answered as it would be alone, and raw HTTP (urllib) for the errors,
the queue's bound, the API key and a client that leaves mid-stream."""

import concurrent.futures
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

import kuiper.llm
from conftest import MODELS

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from kuiper.app.serve import Server  # noqa: E402

SHAKESPEARE = MODELS / "shakespeare"
PROMPTS = ["ROMEO:", "JULIET: O Romeo, Romeo", "First Citizen:\nBefore we proceed any further, hear me speak.",
           "KING HENRY", "To be, or not to be", "HAMLET: What a piece of work is man", "Now is the winter"]


@pytest.fixture(scope="module")
def lm():
    return kuiper.llm.load(SHAKESPEARE, cache_tokens=2048, backend="numpy")


@pytest.fixture(scope="module")
def server(lm):
    with Server(lm, port=0, max_batch=16) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=60, max_retries=0)


def alone(lm, prompt, max_tokens, chat=False):
    """The text LanguageModel.generate gives for the prompt alone, greedy."""
    if chat:
        ids = lm.tokenizer.encode(lm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}]),
                                  add_special_tokens=False)
    else:
        ids = lm.tokenizer.encode(prompt)
    return lm.tokenizer.decode(lm.generate(ids, max_new_tokens=max_tokens), skip_special_tokens=True), len(ids)


def request(server, path, body=None, headers=None, method=None):
    """(status, parsed JSON body, headers) of a raw HTTP request; `body` bytes or a JSON value."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = urllib.request.Request(server.url + path, data=data, method=method,
                                  headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(sent, timeout=60) as reply:
            return reply.status, json.loads(reply.read()), reply.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def test_completions_streaming_or_not_are_the_text_alone(lm, server, client):
    expected, prompt_tokens = alone(lm, PROMPTS[0], 24)
    reply = client.completions.create(model="shakespeare", prompt=PROMPTS[0], max_tokens=24, temperature=0)
    assert reply.choices[0].text == expected and reply.model == "shakespeare"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt_tokens, 24)
    assert reply.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model="shakespeare", prompt=PROMPTS[0], max_tokens=24, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert len(chunks) > 10 and chunks[-1].choices[0].finish_reason == "length"  # token by token
    models = client.models.list()
    assert [m.id for m in models.data] == ["shakespeare"]


def test_chat_streaming_or_not_is_the_reply_alone(lm, server, client):
    question = "Who art thou, and whence comest thou?"
    expected, prompt_tokens = alone(lm, question, 30, chat=True)
    messages = [{"role": "user", "content": question}]
    reply = client.chat.completions.create(model="shakespeare", messages=messages, max_tokens=30, temperature=0)
    assert reply.choices[0].message.content == expected and reply.choices[0].message.role == "assistant"
    assert reply.usage.prompt_tokens == prompt_tokens
    chunks = list(client.chat.completions.create(model="shakespeare", messages=messages, max_tokens=30,
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_overlapping_requests_are_each_answered_as_alone(lm, server, client):
    """Fourteen requests of different prompts and lengths at once, half of them streamed, some with a seed: each
    answer is the one the request gets alone."""
    jobs = [(PROMPTS[i % len(PROMPTS)], 4 + 2 * i, i % 2 == 1) for i in range(14)]
    expected = [alone(lm, prompt, n)[0] for prompt, n, _ in jobs]
    sampled = dict(temperature=0.8, top_p=0.9, seed=11)
    sampled_alone = client.completions.create(model="shakespeare", prompt=PROMPTS[3], max_tokens=20, **sampled)

    def ask(job):
        if job == "sampled":
            return client.completions.create(model="shakespeare", prompt=PROMPTS[3], max_tokens=20,
                                             **sampled).choices[0].text
        prompt, n, stream = job
        reply = client.completions.create(model="shakespeare", prompt=prompt, max_tokens=n, temperature=0,
                                          stream=stream)
        return "".join(c.choices[0].text for c in reply) if stream else reply.choices[0].text

    steps = server.scheduler.steps
    with concurrent.futures.ThreadPoolExecutor(len(jobs) + 1) as pool:
        answers = list(pool.map(ask, jobs + ["sampled"]))
    assert answers[:-1] == expected
    assert answers[-1] == sampled_alone.choices[0].text
    assert server.scheduler.steps - steps < sum(n for _, n, _ in jobs) // 2  # they shared steps


@pytest.mark.parametrize("body, status, param, message", [
    (b"{not json", 400, None, "not valid JSON"),
    ([1, 2], 400, None, "must be a JSON object"),
    ({"prompt": 7}, 400, "prompt", "'prompt' must be a non-empty string"),
    ({"prompt": "a", "max_tokens": "12"}, 400, "max_tokens", "'max_tokens' must be an integer, got str"),
    ({"prompt": "a", "temperature": -1}, 400, "temperature", "'temperature' must be from 0 to 2"),
    ({"prompt": "a", "stream": "yes"}, 400, "stream", "'stream' must be a boolean"),
    ({"prompt": "a", "n": 3}, 400, "n", "'n'=3 is not supported"),
    ({"prompt": [5, 99999]}, 400, "prompt", "token ids must be from 0 to 4095"),
    ({"prompt": "a", "model": "gpt-4o"}, 404, "model", "the model 'gpt-4o' does not exist"),
    ({"prompt": "a", "max_tokens": 5000}, 400, "max_tokens", "'max_tokens' must be from 1 to 256"),
    ({"prompt": "word " * 200, "max_tokens": 100}, 400, "max_tokens", "more than the model's context of 256"),
    ({"prompt": "a\ud800b"}, 400, "prompt", "prompt is not valid Unicode: U+D800 at character 1 is half of"),
    ({"prompt": "a", "stop": ["\udfff"]}, 400, "stop", "stop is not valid Unicode"),
    (b'{"prompt": "a", "x": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400, None, "nested too deeply"),
    ({"prompt": "a", "response_format": {"type": "json_object"}}, 400, "response_format", "is not supported"),
    ({"prompt": "a", "presence_penalty": 0.5}, 400, "presence_penalty", "'presence_penalty'=0.5 is not supported"),
    ({"prompt": "a", "logprobs": 0}, 400, "logprobs", "'logprobs'=0 is not supported"),
])
def test_bad_requests_get_the_apis_error_object(server, body, status, param, message):
    code, reply, _ = request(server, "/v1/completions", body)
    assert code == status
    assert set(reply["error"]) == {"message", "type", "param", "code"} and message in reply["error"]["message"]
    assert reply["error"]["param"] == param


def test_chat_template_kwargs_reach_the_template(lm, server, monkeypatch):
    monkeypatch.setattr(lm.tokenizer, "chat_template",
                        "{% if brief %}Be brief. {% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    body = {"messages": [{"role": "user", "content": "Speak"}], "max_tokens": 2, "temperature": 0}
    for variables, text in (({}, "Speak"), ({"brief": True}, "Be brief. Speak")):
        code, reply, _ = request(server, "/v1/chat/completions", dict(body, chat_template_kwargs=variables))
        prompt_tokens = len(lm.tokenizer.encode(text, add_special_tokens=False))
        assert code == 200 and reply["usage"]["prompt_tokens"] == prompt_tokens
    for variables in ({"messages": []}, [1]):
        code, reply, _ = request(server, "/v1/chat/completions", dict(body, chat_template_kwargs=variables))
        assert code == 400 and reply["error"]["param"] == "chat_template_kwargs"
    with Server(lm, port=0, template_variables={"brief": True}) as briefed:  # kuiper serve --template-kwargs
        for variables, text in (({}, "Be brief. Speak"), ({"brief": False}, "Speak")):  # the request's go over
            code, reply, _ = request(briefed, "/v1/chat/completions", dict(body, chat_template_kwargs=variables))
            prompt_tokens = len(lm.tokenizer.encode(text, add_special_tokens=False))
            assert code == 200 and reply["usage"]["prompt_tokens"] == prompt_tokens


def test_other_paths_and_chat_errors(server):
    code, reply, _ = request(server, "/v1/engines")
    assert code == 404 and reply["error"]["type"] == "not_found_error"
    code, reply, _ = request(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]})
    assert code == 400 and reply["error"]["param"] == "messages[0].content"
    code, reply, _ = request(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "\udcff"}]})
    assert code == 400 and reply["error"]["param"] == "messages[0].content"
    assert reply["error"]["message"] == ("messages[0].content is not valid Unicode: U+DCFF at character 0 is half of "
                                         "a surrogate pair")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:  # a body too large to be read
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 413 ")
    code, reply, _ = request(server, "/health")
    assert code == 200 and reply["status"] == "ok" and reply["kv_blocks"] == 128


def wait_for(condition, timeout=30):
    waited = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < waited, "timed out"
        time.sleep(0.01)


def test_a_full_queue_gets_429_with_retry_after(lm):
    with Server(lm, port=0, max_batch=1, max_queue=1) as small:
        long = {"prompt": PROMPTS[2], "max_tokens": 180, "temperature": 0}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            running = pool.submit(request, small, "/v1/completions", long)
            wait_for(lambda: small.scheduler.running)
            waiting = pool.submit(request, small, "/v1/completions", dict(long, max_tokens=1))
            wait_for(lambda: small.scheduler.waiting)
            code, reply, headers = request(small, "/v1/completions", dict(long, max_tokens=1))
            assert code == 429 and headers["Retry-After"] == "1"
            assert reply["error"]["type"] == "rate_limit_error" and reply["error"]["code"] == "queue_full"
            assert running.result(timeout=60)[0] == waiting.result(timeout=60)[0] == 200


def test_the_api_key_is_required_when_given(lm):
    with Server(lm, port=0, api_key="sesame") as locked:
        code, reply, _ = request(locked, "/v1/models")
        assert code == 401 and reply["error"]["code"] == "invalid_api_key"
        code, _, _ = request(locked, "/v1/completions", {"prompt": "a"}, {"Authorization": "Bearer wrong"})
        assert code == 401
        client = openai.OpenAI(base_url=f"{locked.url}/v1", api_key="sesame", max_retries=0)
        assert client.completions.create(model="shakespeare", prompt="a", max_tokens=2).usage.completion_tokens <= 2
        assert locked.host == "127.0.0.1"


def test_a_client_leaving_mid_stream_frees_its_blocks(lm, server):
    body = json.dumps({"prompt": PROMPTS[1], "max_tokens": 230, "temperature": 0, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = b""
        while received.count(b"data: ") < 3:  # a few tokens in
            received += s.recv(4096)
        assert server.scheduler.running
    wait_for(lambda: not server.scheduler.running and
             server.scheduler.load()["kv_blocks_held"] == len(lm.sequence.table))


def test_the_command_checks_its_options_before_loading(capsys):
    from kuiper.app.cli import main

    assert main(["serve", "--max-batch", "0"]) == 1
    assert "--max-batch 0: out of range" in capsys.readouterr().err
    assert main(["serve", "/no/such/model"]) == 1
    assert "/no/such/model" in capsys.readouterr().err
    assert main(["serve", "--api-key", " "]) == 1
    assert "--api-key: give a key that is not empty" in capsys.readouterr().err
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a port in use: said before the model loads
        port = taken.getsockname()[1]
        assert main(["serve", "/no/such/model", "--port", str(port)]) == 1
        said = capsys.readouterr().err
        assert said == f"kuiper: error: cannot listen on 127.0.0.1 port {port}: Address already in use\n"


def test_shutting_down_ends_open_streams_with_an_error(lm):
    small = Server(lm, port=0).start()
    try:
        body = json.dumps({"prompt": PROMPTS[1], "max_tokens": 230, "temperature": 0, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", small.port), timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            received = b""
            while received.count(b"data: ") < 2:
                received += s.recv(4096)
            small.stop()
            while b"[DONE]" not in received:
                more = s.recv(4096)
                assert more, "the stream ended without [DONE]"
                received += more
        assert b'"the server is shutting down"' in received
    finally:
        small.stop()
